"""`make soak` (issue 37): a long crawl of the synthetic web under a schedule of faults, judged by
the checkers, with a report.

Every part is a real process on loopback: the hub (``hubs.py``: by default a primary, two replicas
and three Sentinels, AOF on, as the role configures them; ``--hubs 1``: one redis-server), the
synthetic web (``web.py``), the demo site (the account pool's login target), three forward proxies
leaving from 127.0.0.2-4, the proxy and account pools, and ``--workers`` processes of ``scrapy
crawl soak`` (``project/``: a classic project with the fleet's add-on, nothing of the target
written in). Each worker reaches the hub through relays of its own (``relay.py``), so one can be
cut from the hub. The faults (``schedule.py``) strike over ``--minutes``; the crawl then runs on
until every page is fetched (or ``--max-minutes``). A sampler records, every ``SAMPLE`` seconds,
the pages served and refused, the hub's memory, each worker process's RSS and the queue. At the end
the workers are stopped as an operator stops them, the items are exported with `crawlfleet export`,
and ``judge.py`` applies the checkers (``checkers.py``) and writes ``soak.json``, ``soak.html`` and
``soak.png`` into ``--out``.

    scripts/soak.sh --minutes 45 --hosts 1000 --pages 1000000 --workers 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
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
from soak.hubs import OneHub, ThreeHubs, start_hubs
from soak.judge import ITEMS, access_lines, conclude
from soak.relay import Relay
from soak.web import Web
from soak.webprocess import start_web
from support.net import free_port
from support.services import start_process, stop_process
from support.waiting import wait_until

from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.settingtable import default
from crawlfleet.views.crawl import spider_snapshot

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "project"
BIN = Path(sys.executable).parent
SPIDER = "soak"
HOSTNAME = socket.gethostname()  # what a worker on this machine names as its host
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


class SetupError(RuntimeError):
    """The soak cannot start where it was asked to run (one line: what to do)."""


@dataclass
class Worker:
    """One worker's place in the fleet: its name, relays to the hub and its current process."""

    name: str
    relays: list[Relay]
    log: Path
    proc: subprocess.Popen[bytes] | None = None


class Soak:
    """The soak on loopback. What reaches the fleet (bring-up, the hub's numbers, the worker
    processes, the access log, the faults, export) is in the methods a soak on other hosts
    (``lab.py``) overrides; the run, the sampling and the record are the same for both."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.work = self.out / "work"
        self.web = Web.draw(args.hosts, args.pages, args.seed, getattr(args, "domain", ""))
        # Drawn before anything starts: a soak whose schedule cannot be is one line, not a
        # traceback after the bring-up.
        self.plan = schedule.plan(
            args.minutes * 60, args.every, args.warmup, self.worker_names(),
            self.proxy_names(), tuple(h.index for h in self.web.hosts if h.limit), args.seed,
            cut=self.can_cut(), sentinel=self.sentinel(),
        )  # fmt: skip
        self.port, self.admin = free_port(), free_port()
        self.access_log = self.work / "access.log"
        self.started = 0.0
        self.samples: list[dict[str, Any]] = []
        self.faults: list[checkers.Fault] = []
        self.fetched: Counter[str] = Counter()  # path@host of every 200
        self.workers: list[Worker] = []
        self.hub: OneHub | ThreeHubs
        self.lab: Lab
        self.env: dict[str, str] = {}
        self.roots = ""
        self._offset = 0
        self._stop = threading.Event()
        self._injecting = threading.Lock()

    # -- what a soak elsewhere changes -------------------------------------------------------

    def worker_names(self) -> tuple[str, ...]:
        """The workers the schedule may strike, by name."""
        return tuple(f"w{i + 1}" for i in range(self.args.workers))

    def proxy_names(self) -> tuple[str, ...]:
        """The forward proxies the schedule may stop, by name."""
        return PROXY_SOURCES

    def can_cut(self) -> bool:
        """Whether a worker can be cut from the hub (each reaches it through its own relay)."""
        return True

    def sentinel(self) -> bool:
        """Whether the soak runs on three hubs with Sentinels (a failover can strike)."""
        return int(getattr(self.args, "hubs", 1)) == 3

    # -- bring-up ---------------------------------------------------------------------------

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.hub = start_hubs(self.work / "hub", self.args.hubs)
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
            worker = Worker(f"w{i + 1}", self.hub.relays(), self.work / f"w{i + 1}.log")
            self.workers.append(worker)
            self.start_worker(worker)
        self.started = time.time()

    def start_worker(self, worker: Worker) -> None:
        env = {**self.env, "REDIS_URL": self.hub.worker_url(worker.relays),
               "SOAK_SEEN_CACHE": str(self.args.seen_cache)}  # fmt: skip
        argv = [str(BIN / "scrapy"), "crawl", SPIDER, "-a", f"roots={self.roots}"]
        worker.proc = start_process(argv, worker.log, env=env, cwd=PROJECT)

    # -- sampling ---------------------------------------------------------------------------

    def new_access(self) -> bytes:
        """The access log's bytes written since the last call (whole lines only)."""
        data = self.access_from(self._offset)
        end = data.rfind(b"\n") + 1
        self._offset += end
        return data[:end]

    def access_from(self, offset: int) -> bytes:
        """The access log from byte ``offset`` on, as far as it is written."""
        with self.access_log.open("rb") as f:
            f.seek(offset)
            return f.read()

    def hub_numbers(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The hub's memory and its parts (:func:`hub_numbers`), and the crawl's snapshot with
        each worker's Scrapy stats."""
        client = self.hub.client()
        try:
            return hub_numbers(client), spider_snapshot(client, SPIDER, with_scrapy=True)
        finally:
            client.close()

    def processes(self) -> dict[str, tuple[str, int, int, int]]:
        """Each running worker process, by a name a restart changes: (host, pid, RSS, threads)."""
        found = {}
        for w in self.workers:
            if w.proc:
                rss, threads = _status(w.proc.pid)
                if rss:
                    found[f"{w.name}:{w.proc.pid}"] = (HOSTNAME, w.proc.pid, rss, threads)
        return found

    def snapshot(self) -> dict[str, Any]:
        """The crawl as ``crawlfleet status`` reads it."""
        client = self.hub.client()
        try:
            return spider_snapshot(client, SPIDER)
        finally:
            client.close()

    def _read_access(self) -> Counter[int]:
        """The access log's new lines: the 200s counted per page, every status counted."""
        statuses: Counter[int] = Counter()
        for when, host, path, status in access_lines(self.new_access()):
            statuses[status] += 1
            if status == 200:
                self.fetched[f"{host}{path}"] += 1
        return statuses

    def sample(self) -> dict[str, Any]:
        memory, view = self.hub_numbers()
        statuses = self._read_access()
        status = self.processes()
        # each worker's seen cache as its last statistics said (its warm-up ends once it is full)
        cached = {
            (r.get("host"), r.get("pid")): r.get("scrapy", {}) for r in view.get("workers", ())
        }
        seen = {
            process: cached[(host, pid)]["scheduler/seen_cache"]
            for process, (host, pid, _, _) in status.items()
            if "scheduler/seen_cache" in cached.get((host, pid), {})
        }
        return {
            "t": time.time(),
            "served": statuses.get(200, 0),
            "refused": statuses.get(403, 0) + statuses.get(429, 0),
            "failed": statuses.get(500, 0),
            **memory,
            "queued": view.get("queued"),
            "leased": view.get("leased"),
            "rss": {k: v[2] for k, v in status.items()},
            "threads": {k: v[3] for k, v in status.items()},
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

    def leased_by(self, workers: list[Any]) -> int:
        """Requests the hub has leased to these workers' current processes (what may be fetched
        again when a fault strikes them), from one read of the crawl."""
        rows = self.snapshot().get("workers", [])
        processes = {(host, pid) for host, pid in map(self.process_of, workers) if pid}
        return sum(
            int(r.get("leased") or 0) for r in rows if (r.get("host"), r.get("pid")) in processes
        )

    def process_of(self, worker: Any) -> tuple[str, int]:
        """(host, pid) of ``worker``'s current process (pid 0: none)."""
        return HOSTNAME, worker.proc.pid if worker.proc else 0

    def inject(self, planned: schedule.Planned) -> checkers.Fault:
        start = time.time()
        kind, target = planned.kind, planned.target
        worker = next((w for w in self.workers if w.name == target), None)
        # What may be fetched again: the leases of the workers the fault touches (all of them for
        # the hub, a proxy or a site; the rolling restart counts each as it goes).
        touched = [worker] if worker else self.workers
        in_flight = 0 if kind == "rolling-restart" else self.leased_by(touched)
        in_flight += self.strike(planned, worker)
        name = f"{kind} {target}".strip()
        return checkers.Fault(name, start, time.time(), in_flight, EXPLAINS[kind])

    def strike(self, planned: schedule.Planned, worker: Any) -> int:
        """Inject ``planned`` (on ``worker`` when it names one) and lift it; what was in flight
        beyond the leases counted before (a rolling restart counts each worker's as it goes)."""
        kind, target, in_flight = planned.kind, planned.target, 0
        if kind == "kill-worker" and worker and worker.proc:
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait(30)
            self.start_worker(worker)
        elif kind == "freeze-hub":
            self.hub.freeze(planned.hold)
        elif kind == "restart-hub":
            self.hub.restart()
        elif kind == "failover":
            self.hub.failover()
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
            for relay in worker.relays:
                relay.cut()
            time.sleep(planned.hold)
            for relay in worker.relays:
                relay.heal()
        return in_flight

    def _injector(self, plan: list[schedule.Planned]) -> None:
        late = 0.0  # what the faults so far took beyond their planned hold (a rolling restart of
        # the lab's units takes minutes): the faults after are moved by it, so the crawl has as
        # long to recover from each as planned, not none
        for planned in plan:
            if self._stop.wait(max(0.0, self.started + planned.at + late - time.time())):
                return
            with self._injecting:
                fault = self.inject(planned)
            self.faults.append(fault)
            took = fault.end - fault.start
            late += max(0.0, took - planned.hold)
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
        injector = threads[1]

        def finished() -> bool:
            """Every page fetched once every fault has struck, or every worker ended by itself (a
            crawl that closes with pages left is what the checkers report, not a harness error)."""
            with self._injecting:  # a worker a fault stopped is started again under this lock
                if self.workers_ended():
                    print("soak: every worker has ended by itself", flush=True)
                    return True
            return not injector.is_alive() and len(self.fetched) >= total

        try:
            wait_until(finished, "every page fetched", timeout=deadline - time.time(), interval=5)
        except AssertionError as exc:
            print(f"soak: {exc}", flush=True)
        self._stop.set()  # no fault after this; one under way is lifted before the join returns
        for thread in threads:
            thread.join(120)
        self.stop_workers()  # as an operator stops them: each flushes its items
        lengths: list[int] = []

        def items_settled() -> bool:
            """The items stream no longer growing between two reads (the last batches flushed)."""
            lengths.append(self.items_length())
            return len(lengths) > 1 and lengths[-1] == lengths[-2]

        wait_until(items_settled, "the items flushed", timeout=120, interval=2)
        return self.finish(plan)

    def workers_ended(self) -> bool:
        """Every worker process has ended by itself."""
        return all(w.proc and w.proc.poll() is not None for w in self.workers)

    def stop_workers(self) -> None:
        for w in self.workers:
            if w.proc:
                stop_process(w.proc, timeout=60)

    def items_length(self) -> int:
        client = self.hub.client()
        try:
            return int(client.xlen(SpiderKeys(SPIDER).items))
        finally:
            client.close()

    def collect(self) -> None:
        """Whatever the judging reads that is not yet in the work directory (here: all is)."""

    def finish(self, plan: list[schedule.Planned]) -> int:
        self.samples.append(self.sample())
        self.export()
        bloom = self.bloom()
        self.collect()
        record = {
            "args": {k: str(v) for k, v in vars(self.args).items()},
            "started": self.started,
            "sample_seconds": SAMPLE,
            "seen_cache_size": self.args.seen_cache,
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
            for relay in w.relays:
                relay.stop()
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
    lost = lost_fingerprints(web, port, fetched)
    layers, answers = bloom_answers(client, [fp.hex() for _, fp in lost])
    return {"layers": layers, "seen": [page for (page, _), yes in zip(lost, answers) if yes]}


def lost_fingerprints(web: Web, port: int, fetched: Mapping[str, int]) -> list[tuple[str, bytes]]:
    """Each reachable page never fetched, with its request's fingerprint."""
    fingerprint = RequestFingerprinter().fingerprint
    return [
        (web.logged(h, p), fingerprint(Request(web.url(h, p, port))))
        for h, p in web.reachable()
        if web.logged(h, p) not in fetched
    ]


def bloom_answers(
    client: redis.Redis, fingerprints: list[str]
) -> tuple[list[list[int]], list[bool]]:
    """The soak spider's Bloom filter's layers in use, (bits, hashes, fingerprints) each, and its
    answer for each of ``fingerprints`` (hex). Self-contained: the lab soak runs this very
    function on a worker (``lab.py``)."""
    from crawlfleet.frontier.bloom import BloomFilter
    from crawlfleet.frontier.bloomlayout import ScalableLayout
    from crawlfleet.hub.keys import SpiderKeys

    bloom = BloomFilter.existing(client, SpiderKeys("soak").bloomfilter)
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
    answers = bloom.contains_many(bytes.fromhex(fp) for fp in fingerprints)
    return layers, [bool(a) for a in answers]


def hub_numbers(client: redis.Redis) -> dict[str, Any]:
    """The hub's memory (``used_memory``), what the crawl's items stream, queue (its counter and
    every site's queue) and Bloom filter take of it, and the rest measured directly, not by
    subtraction (the per-key figures of 100 MiB of stream and queue are off by more than the few
    MiB left): every other key, by kind (its name's part after the spider's), and the server's
    own buffers (clients, AOF, Lua, replication). One SCAN of every key, exact counts
    (``SAMPLES 0``)."""
    keys = SpiderKeys(SPIDER)
    work = {"items_memory": keys.items, "queue_memory": keys.requests,
            "filter_memory": keys.bloomfilter}  # fmt: skip
    names = [n.decode() if isinstance(n, bytes) else n for n in client.scan_iter(count=1000)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.memory_usage(name, samples=0)
    found = dict.fromkeys(work, 0)
    other: dict[str, int] = {}
    for name, size in zip(names, pipe.execute(), strict=True):
        field = next((f for f, k in work.items() if name == k or name.startswith(k + ":")), "")
        if field:
            found[field] += int(size or 0)
        else:
            kind = name.removeprefix(SPIDER + ":").split(":")[0]
            other[kind] = other.get(kind, 0) + int(size or 0)
    stats = {str(k): v for k, v in client.memory_stats().items()}
    buffers = ("clients.normal", "clients.slaves", "aof.buffer", "lua.caches",
               "replication.backlog")  # fmt: skip
    return {
        "memory": int(client.info("memory")["used_memory"]),
        **found,
        "other_memory": sum(other.values()),
        "buffers_memory": sum(int(stats.get(b) or 0) for b in buffers),
        "other_by_kind": other,
    }


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
    parser.add_argument(
        "--hubs", type=int, choices=(1, 3),
        help="on loopback: 3 (the default) runs a primary, two replicas and three Sentinels and "
        "a failover is one of the faults; 1 runs one hub as most fleets do. --lab: the lab's hub",
    )  # fmt: skip
    parser.add_argument("--every", type=float, default=240, help="seconds between faults")
    parser.add_argument("--warmup", type=float, default=120, help="seconds before the first")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument(
        "--seen-cache", type=int, default=default("SCHEDULER_SEEN_CACHE"),
        help="the workers' SCHEDULER_SEEN_CACHE (default: its default); each worker's RSS is "
        "judged once its cache is full, so a shorter crawl needs a smaller one",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results/soak"))
    parser.add_argument(
        "--lab", action="store_true",
        help="on the running lab's hosts (make lab-up), not on loopback: --per-host soak units "
        "on each crawler host (--workers unused)",
    )  # fmt: skip
    parser.add_argument("--per-host", type=int, default=2, help="--lab: soak units per host")
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
    if args.per_host < 1:
        parser.error("--per-host must be at least 1")
    if args.seen_cache < 1:
        parser.error("--seen-cache must be at least 1")
    if args.lab and args.hubs not in (None, 1):
        parser.error("--hubs: the lab soak runs on the lab's one hub (make lab-ha fails it over)")
    args.hubs = args.hubs or (1 if args.lab else 3)
    try:
        if args.lab:
            from soak.lab import LabSoak  # the lab's helpers (scripts/labcrawl.py) only then

            soak: Soak = LabSoak(args)
        else:
            soak = Soak(args)
    except ValueError as exc:  # the web or the schedule cannot be drawn
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    try:
        soak.start()
        return soak.run()
    except SetupError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return 2
    finally:
        soak.close()


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
