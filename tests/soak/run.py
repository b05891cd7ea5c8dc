"""`make soak` (issue 37): a long crawl of the synthetic web under a schedule of faults, judged by
the checkers, with a report.

Every part is a real process on loopback: the hub's redis-server (AOF on, as the role configures
it), the synthetic web (``web.py``), the demo site (the account pool's login target), three forward
proxies leaving from 127.0.0.2-4, the proxy and account pools, and ``--workers`` processes of
``scrapy crawl soak`` (``project/``: a classic project with the fleet's add-on, nothing of the
target written in). Each worker reaches the hub through its own relay (``relay.py``), so one can be
cut from the hub. The faults (``schedule.py``) strike over ``--minutes``; the crawl then runs on
until every page is fetched (or ``--max-minutes``). A sampler records, every ``SAMPLE`` seconds,
the pages served and refused, the hub's memory, each worker process's RSS and the queue. At the
end the workers are stopped as an operator stops them, the items are exported with `crawlfleet
export`, and ``judge.py`` applies the checkers (``checkers.py``) and writes ``soak.json``,
``soak.html`` and ``soak.png`` into ``--out``.

    scripts/soak.sh --minutes 45 --hosts 1000 --pages 1000000 --workers 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
from book_lab import ACCOUNT_KEY, PROXY_KEY, Lab
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from soak import checkers, schedule
from soak.judge import ITEMS, access_lines, conclude
from soak.relay import Relay
from soak.web import Web
from soak.webprocess import start_web
from support.net import free_port
from support.services import start_process, stop_process
from support.waiting import wait_until

from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import ScalableLayout
from crawlfleet.hub.keys import SpiderKeys, escape_glob
from crawlfleet.settingtable import default
from crawlfleet.views.crawl import spider_snapshot

from redis_server import RedisServer, start_redis

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "project"
BIN = Path(sys.executable).parent
SPIDER = "soak"
SAMPLE = 5.0  # seconds between samples
PROXY_SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")  # the forward proxies' outgoing addresses
ROOTS = 5  # hosts whose root page each worker starts from
# The ERROR lines a fault may cause while it lasts (and its grace after): what a worker logs when
# the hub, a proxy or a site goes away for a while.
HUB_GONE = (r"(?i)redis|connection|timeout|timed out|hub", r"Gave up retrying")
EXPLAINS = {
    "kill-worker": (),
    "freeze-hub": HUB_GONE,
    "restart-hub": HUB_GONE,
    "cut-worker": HUB_GONE,
    "stop-proxy": (r"(?i)proxy|connection|refused|timed out|timeout", r"Gave up retrying"),
    "ban-storm": (r"Gave up retrying", r"(?i)ban"),
    "rolling-restart": (),
    "failover": HUB_GONE,
}


@dataclass
class Worker:
    """One worker's place in the fleet: its name, relay to the hub and its current process."""

    name: str
    relay: Relay
    log: Path
    proc: subprocess.Popen[bytes] | None = None


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.work = self.out / "work"
        self.web = Web.draw(args.hosts, args.pages, args.seed)
        # Drawn before anything starts: a soak whose schedule cannot be is one line, not a
        # traceback after the bring-up.
        self.plan = schedule.plan(
            args.minutes * 60, args.every, args.warmup,
            tuple(f"w{i + 1}" for i in range(args.workers)), PROXY_SOURCES,
            tuple(h.index for h in self.web.hosts if h.limit), args.seed,
        )  # fmt: skip
        self.port, self.admin = free_port(), free_port()
        self.access_log = self.work / "access.log"
        self.started = 0.0
        self.samples: list[dict[str, Any]] = []
        self.faults: list[checkers.Fault] = []
        self.fetched: Counter[str] = Counter()  # path@host of every 200
        self.workers: list[Worker] = []
        self.hub: RedisServer
        self.lab: Lab
        self._offset = 0
        self._stop = threading.Event()
        self._injecting = threading.Lock()

    # -- bring-up ---------------------------------------------------------------------------

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "hub").mkdir(exist_ok=True)
        self.hub = start_redis(self.work / "hub")
        args = self.args
        self.web_proc = start_web(
            self.work / "web.log", self.port, self.admin, args.hosts, args.pages, args.seed,
            self.access_log,
        )  # fmt: skip
        self.lab = Lab(self.work, self.hub.url)
        self.lab.start_demosite(books=18)
        self.lab.start_proxies(PROXY_SOURCES)
        proxypool = self.lab.start_proxypool()
        accountpool = self.lab.start_accountpool()
        self.roots = ",".join(
            self.web.url(h, 0, self.port) for h in range(min(ROOTS, len(self.web.hosts)))
        )
        self.env = self.lab.env(
            PROXYPOOL_URL=proxypool,
            PROXYPOOL_API_KEY=PROXY_KEY,
            ACCOUNTPOOL_URL=accountpool,
            ACCOUNTPOOL_API_KEY=ACCOUNT_KEY,
            ACCOUNTPOOL_SITE="demosite",
            PYTHONPATH=str(PROJECT),
        )
        for i in range(self.args.workers):
            relay = Relay(free_port(), ("127.0.0.1", self.hub.port)).start()
            worker = Worker(f"w{i + 1}", relay, self.work / f"w{i + 1}.log")  # the plan's names
            self.workers.append(worker)
            self.start_worker(worker)
        self.started = time.time()

    def start_worker(self, worker: Worker) -> None:
        env = {**self.env, "REDIS_URL": f"redis://127.0.0.1:{worker.relay.port}/0"}
        argv = [str(BIN / "scrapy"), "crawl", SPIDER, "-a", f"roots={self.roots}"]
        worker.proc = start_process(argv, worker.log, env=env, cwd=PROJECT)

    # -- sampling ---------------------------------------------------------------------------

    def _read_access(self) -> Counter[int]:
        """The access log's new lines: the 200s counted per page, every status counted."""
        statuses: Counter[int] = Counter()
        with self.access_log.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for when, host, path, status in access_lines(data[:end]):
            statuses[status] += 1
            if status == 200:
                self.fetched[f"{host}{path}"] += 1
        return statuses

    def sample(self) -> dict[str, Any]:
        client = self.hub.client()
        try:
            memory = int(client.info("memory")["used_memory"])
            items = int(client.memory_usage(SpiderKeys(SPIDER).items, samples=0) or 0)
            view = spider_snapshot(client, SPIDER, with_scrapy=True)
            queue = memory_of(client, SpiderKeys(SPIDER).requests)
            bloom = memory_of(client, SpiderKeys(SPIDER).bloomfilter)
        finally:
            client.close()
        statuses = self._read_access()
        status = {f"{w.name}:{w.proc.pid}": _status(w.proc.pid) for w in self.workers if w.proc}
        # each worker's seen cache as its last statistics said (its warm-up ends once it is full)
        cached = {row.get("pid"): row.get("scrapy", {}) for row in view.get("workers", ())}
        seen = {
            f"{w.name}:{w.proc.pid}": cached[w.proc.pid]["scheduler/seen_cache"]
            for w in self.workers
            if w.proc and "scheduler/seen_cache" in cached.get(w.proc.pid, {})
        }
        return {
            "t": time.time(),
            "served": statuses.get(200, 0),
            "refused": statuses.get(403, 0) + statuses.get(429, 0),
            "failed": statuses.get(500, 0),
            "memory": memory,
            "items_memory": items,
            "queue_memory": queue,
            "filter_memory": bloom,
            "queued": view.get("queued"),
            "leased": view.get("leased"),
            "rss": {k: v[0] for k, v in status.items() if v[0]},
            "threads": {k: v[1] for k, v in status.items() if v[0]},
            "seen_cache": seen,
            "distinct": len(self.fetched),
        }

    def _sampler(self) -> None:
        while not self._stop.wait(SAMPLE):
            try:
                self.samples.append(self.sample())
            except Exception as exc:  # the hub frozen or restarting: a gap, said in the record
                self.samples.append({"t": time.time(), "error": str(exc)[:200]})

    # -- faults -----------------------------------------------------------------------------

    def leased_by(self, workers: list[Worker]) -> int:
        """Requests the hub has leased to these workers' current processes (what may be fetched
        again when a fault strikes them), from one read of the crawl."""
        client = self.hub.client()
        try:
            rows = spider_snapshot(client, SPIDER).get("workers", [])
        finally:
            client.close()
        pids = {w.proc.pid for w in workers if w.proc}
        return sum(int(r.get("leased") or 0) for r in rows if r.get("pid") in pids)

    def inject(self, planned: schedule.Planned) -> checkers.Fault:
        start = time.time()
        kind, target = planned.kind, planned.target
        worker = next((w for w in self.workers if w.name == target), None)
        # What may be fetched again: the leases of the workers the fault touches (all of them for
        # the hub, a proxy or a site; the rolling restart counts each as it goes).
        touched = [worker] if worker else self.workers
        in_flight = 0 if kind == "rolling-restart" else self.leased_by(touched)
        if kind == "kill-worker" and worker and worker.proc:
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait(30)
            self.start_worker(worker)
        elif kind == "freeze-hub":
            self.hub.process.send_signal(signal.SIGSTOP)
            time.sleep(planned.hold)
            self.hub.process.send_signal(signal.SIGCONT)
        elif kind == "restart-hub":
            self.hub.stop()
            self.hub.start()
        elif kind == "stop-proxy":
            service = next(s for s in self.lab.proxy_services if target in s.name)
            service.stop()
            time.sleep(planned.hold)
            service.start()
        elif kind == "ban-storm":
            httpx.post(
                f"http://127.0.0.1:{self.admin}/storm?host={target}&seconds={planned.hold}",
                trust_env=False,
            ).raise_for_status()
            time.sleep(planned.hold)
        elif kind == "rolling-restart":
            for w in self.workers:
                in_flight += self.leased_by([w])
                if w.proc:
                    stop_process(w.proc, timeout=60)
                self.start_worker(w)
                time.sleep(SAMPLE)
        elif kind == "cut-worker" and worker:
            worker.relay.cut()
            time.sleep(planned.hold)
            worker.relay.heal()
        name = f"{kind} {target}".strip()
        return checkers.Fault(name, start, time.time(), in_flight, EXPLAINS[kind])

    def _injector(self, plan: list[schedule.Planned]) -> None:
        for planned in plan:
            if self._stop.wait(max(0.0, self.started + planned.at - time.time())):
                return
            with self._injecting:
                fault = self.inject(planned)
            self.faults.append(fault)
            took = fault.end - fault.start
            print(f"soak: {fault.name} at {fault.start - self.started:.0f} s "
                  f"({took:.0f} s, {fault.in_flight} in flight)", flush=True)  # fmt: skip

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> int:
        args, plan = self.args, self.plan
        threads = [
            threading.Thread(target=self._sampler, daemon=True),
            threading.Thread(target=self._injector, args=(plan,), daemon=True),
        ]
        for thread in threads:
            thread.start()
        total = sum(h.pages for h in self.web.hosts)
        deadline = self.started + args.max_minutes * 60
        done_faults = self.started + args.minutes * 60

        def finished() -> bool:
            """Every page fetched once the faults are over, or every worker ended by itself (a
            crawl that closes with pages left is what the checkers report, not a harness error)."""
            with self._injecting:  # a worker a fault stopped is started again under this lock
                if all(w.proc and w.proc.poll() is not None for w in self.workers):
                    print("soak: every worker has ended by itself", flush=True)
                    return True
            return time.time() >= done_faults and len(self.fetched) >= total

        try:
            wait_until(finished, "every page fetched", timeout=deadline - time.time(), interval=5)
        except AssertionError as exc:
            print(f"soak: {exc}", flush=True)
        self._stop.set()  # no fault after this; one under way is lifted before the join returns
        for thread in threads:
            thread.join(120)
        for w in self.workers:  # a worker stopped as an operator does: it flushes its items
            if w.proc:
                stop_process(w.proc, timeout=60)
        lengths: list[int] = []

        def items_settled() -> bool:
            """The items stream no longer growing between two reads (the last batches flushed)."""
            client = self.hub.client()
            try:
                lengths.append(int(client.xlen(SpiderKeys(SPIDER).items)))
            finally:
                client.close()
            return len(lengths) > 1 and lengths[-1] == lengths[-2]

        wait_until(items_settled, "the items flushed", timeout=120, interval=2)
        return self.finish(plan)

    def finish(self, plan: list[schedule.Planned]) -> int:
        self.samples.append(self.sample())
        self.export()
        bloom = self.bloom()
        record = {
            "args": {k: str(v) for k, v in vars(self.args).items()},
            "started": self.started,
            "sample_seconds": SAMPLE,
            "seen_cache_size": default("SCHEDULER_SEEN_CACHE"),  # the soak leaves it as it is
            "port": self.port,
            "plan": [vars(p) for p in plan],
            "faults": [vars(f) for f in self.faults],
            "samples": self.samples,
            "bloom": bloom,
        }
        return conclude(record, self.out)

    def bloom(self) -> dict[str, Any]:
        """The crawl's Bloom filter as the lost-pages checker needs it: its layers (bits,
        hashes, fingerprints) and the lost pages it answers yes for, read while the hub is up."""
        client = self.hub.client()
        try:
            return bloom_record(client, self.web, self.port, self.fetched)
        finally:
            client.close()

    def export(self) -> None:
        out = self.work / ITEMS
        proc = subprocess.run(
            [str(BIN / "crawlfleet"), "export", SPIDER, "-o", str(out), "--quiet",
             "--redis-url", self.hub.url],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"crawlfleet export failed: {proc.stderr[-2000:]}")

    def close(self) -> None:
        self._stop.set()
        for w in self.workers:
            if w.proc:
                stop_process(w.proc, timeout=30)
            w.relay.stop()
        if hasattr(self, "lab"):
            self.lab.close()
        if hasattr(self, "web_proc"):
            stop_process(self.web_proc)
        if hasattr(self, "hub"):
            self.hub.stop()


def bloom_record(
    client: redis.Redis, web: Web, port: int, fetched: Mapping[str, int]
) -> dict[str, Any]:
    """The crawl's Bloom filter: ``layers``, (bits, hashes, fingerprints) of each layer in use
    (a scalable filter's earlier layers hold their capacity), and ``seen``, the pages not
    fetched whose request fingerprint it answers yes for."""
    bloom = BloomFilter.existing(client, SpiderKeys(SPIDER).bloomfilter)
    info = bloom.info()
    count = int(info["count_estimate"] or 0)
    layout = bloom.layout
    if isinstance(layout, ScalableLayout):
        shape = list(zip(layout.layer_bits, layout.layer_hashes, layout.layer_capacity))
        in_use = shape[: info["layers"]]
        full = sum(n for _, _, n in in_use[:-1])
        layers = [[m, k, n] for m, k, n in in_use[:-1]] + [[*in_use[-1][:2], count - full]]
    else:
        layers = [[info["bits"], info["hashes"], count]]
    lost = [
        (web.logged(h, p), web.url(h, p, port))
        for h, p in web.reachable()
        if web.logged(h, p) not in fetched
    ]
    fingerprint = RequestFingerprinter().fingerprint
    answers = bloom.contains_many(fingerprint(Request(url)) for _, url in lost)
    return {"layers": layers, "seen": [page for (page, _), yes in zip(lost, answers) if yes]}


def memory_of(client: redis.Redis, key: str) -> int:
    """Bytes ``key`` and every key under it (``key:*``) take on the hub: for the crawl's queue
    (its counter and every site's queue) and its Bloom filter (its layers and meta), the parts
    of the hub's memory that grow with the work found."""
    names = [key, *client.scan_iter(match=escape_glob(key) + ":*", count=1000)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.memory_usage(name, samples=0)  # every element counted, not a sample
    return sum(int(n or 0) for n in pipe.execute())


def _status(pid: int) -> tuple[int, int]:
    """VmRSS of ``pid`` in bytes and its thread count (0, 0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    rss = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    threads = re.search(r"^Threads:\s+(\d+)", status, re.MULTILINE)
    return (int(rss[1]) * 1024 if rss else 0), (int(threads[1]) if threads else 0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=45, help="the faults' span")
    parser.add_argument("--max-minutes", type=float, default=120, help="the crawl's limit")
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--every", type=float, default=240, help="seconds between faults")
    parser.add_argument("--warmup", type=float, default=120, help="seconds before the first")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--out", type=Path, default=Path("results/soak"))
    parser.add_argument(
        "--judge", action="store_true",
        help="run nothing: judge the soak recorded in --out again (after a checker changed)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.judge:
        try:
            record = json.loads((args.out / "soak.json").read_text())
        except (OSError, ValueError) as exc:
            print(f"soak: --judge: no soak recorded in {args.out} ({exc})", file=sys.stderr)
            return 2
        return conclude(record, args.out)
    if args.workers < 1 or args.max_minutes < args.minutes:
        parser.error("--workers must be at least 1 and --max-minutes at least --minutes")
    try:
        soak = Soak(args)
    except ValueError as exc:  # the web or the schedule cannot be drawn
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    try:
        soak.start()
        return soak.run()
    finally:
        soak.close()


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
