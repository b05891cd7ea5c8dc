"""Hub capacity bench (issue 19): many simulated workers on one Redis, crawlfleet vs scrapy-redis.

Each simulated worker is a real scheduler (``crawlfleet.frontier.scheduler.Scheduler``, or
scrapy-redis 0.9.1's with the peers' python) built with ``scrapy.utils.test.get_crawler`` and
driven directly, as the engine would, without HTTP: ``next_request``, then the links of a fake
response enqueued (page i links to pages 10i+1..10i+10, its parent and page 0: 10 new links and
2 duplicates, as frontier_bench_site.py's pages), then the next ``next_request``, which for
crawlfleet acknowledges the page through the same path the engine's finished requests take (no
engine: every handed-out request counts as done); crawlfleet's heartbeat runs on its interval.

8, 32 and 128 workers run as threads spread over two processes (one per core): processes so that
the client side can use both cores (one process's threads share one GIL), threads so that 128
workers do not mean 128 Scrapy start-ups on a two-core machine. Each worker count gets a fresh
redis-server, a warm-up, then a measured window: Redis CPU per page (``INFO`` used_cpu_sys +
used_cpu_user delta ÷ pages), Redis commands per page (``INFO commandstats`` calls, commands run
inside Lua scripts included, the bench's own INFO excluded), pages/s, Redis busy (CPU seconds ÷
wall seconds: 1.0 is one saturated core) and the latency of ``next_request`` (p50, p99; most calls
are served from crawlfleet's prefetch buffer). Memory: ``used_memory`` on a fresh server before
and after one scheduler enqueues a known number of requests, and after it popped and acknowledged
them all (what is left is the fingerprints).

Run alone: ``scripts/bench.sh --only hub``; the worker and memory modes of this file
(``bench_hub.py worker|memory …``) are what the bench runs in its subprocesses.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchrow import Section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "hub capacity (issue 19)"
row = Section(SECTION).row
PROCESSES = 2
WORKERS = (8, 32, 128)
SITE = "https://bench.test/p/"
CRAWLFLEET = "crawlfleet"
BATCHED = "crawlfleet, SCHEDULER_ENQUEUE_BATCH"
PEER = "scrapy-redis 0.9.1"
MODES = {CRAWLFLEET: "crawlfleet", BATCHED: "crawlfleet-batch", PEER: "scrapy-redis"}


# -- the simulated workers (run in subprocesses) ----------------------------------------------


def links(page: int) -> list[str]:
    """The fake response of page ``page``: its children, its parent and the first page."""
    children = [f"{SITE}{c}" for c in range(10 * page + 1, 10 * page + 11)]
    return [*children, f"{SITE}{max(0, (page - 1) // 10)}", f"{SITE}0"]


def hub_links(url: str) -> list[str]:
    """The links of the fake response of the page at ``url``."""
    return links(page_of(url))


def build_scheduler(
    mode: str, redis_url: str, persist: bool = True, extra: dict[str, Any] | None = None
) -> Any:
    """One opened scheduler of ``mode``, as Scrapy builds it (politeness pacer off); ``extra``:
    settings on top of the bench's."""
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    settings: dict[str, Any] = {"REDIS_URL": redis_url, "LOG_LEVEL": "WARNING"}
    scheduler_cls: Any
    if mode.startswith("crawlfleet"):
        from crawlfleet.frontier.scheduler import Scheduler

        scheduler_cls = Scheduler
        settings["DUPEFILTER_CLASS"] = "crawlfleet.frontier.dupefilter.SetDupeFilter"
        settings["SCHEDULER_ENQUEUE_BATCH"] = mode == "crawlfleet-batch"
        # The frontier alone (scrapy-redis has no budget): politeness off, as the frontier
        # requires it to be said when its middleware is not installed.
        settings["POLITENESS_ENABLED"] = False
    else:
        from scrapy_redis.scheduler import Scheduler as RedisScheduler

        scheduler_cls = RedisScheduler
        settings["DUPEFILTER_CLASS"] = "scrapy_redis.dupefilter.RFPDupeFilter"
        settings["SCHEDULER_PERSIST"] = persist
    settings.update(extra or {})
    crawler = get_crawler(type("HubSpider", (Spider,), {"name": "hub"}), settings)
    crawler.spider = crawler._create_spider()
    scheduler = scheduler_cls.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler


def enqueue_page(scheduler: Any, mode: str, urls: list[str]) -> None:
    """The spider's output for one fake response, handed to the scheduler as the engine does."""
    from scrapy import Request

    for url in urls:
        scheduler.enqueue_request(Request(url))
    if mode == "crawlfleet-batch":
        scheduler._flush_pending()  # what the reactor turn after the callback would do


def page_of(url: str) -> int:
    return int(url.rsplit("/", 1)[1])


def host_of(url: str) -> str:
    return url.split("/", 3)[2]


class SimulatedWorker(threading.Thread):
    """One crawl worker: pop, 'download', enqueue the links (``site``: a page's URL to its
    links), until the window ends; ``served`` counts the window's pages per host."""

    def __init__(
        self,
        scheduler: Any,
        mode: str,
        window: tuple[float, float],
        site: Callable[[str], list[str]] = hub_links,
    ) -> None:
        super().__init__(daemon=True)
        self.scheduler, self.mode, self.window, self.site = scheduler, mode, window, site
        self.pages = 0
        self.served: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.error = ""

    def run(self) -> None:
        try:
            self._crawl()
        except Exception as exc:
            self.error = repr(exc)

    def _crawl(self) -> None:
        start, end = self.window
        scheduler, fleet = self.scheduler, self.mode.startswith("crawlfleet")
        beat = scheduler.config.heartbeat_interval if fleet else 0.0
        last_beat = time.monotonic()
        while True:
            before = time.monotonic()
            if before >= end:
                return
            request = scheduler.next_request()
            after = time.monotonic()
            if start <= before:
                self.latencies.append(after - before)
            if fleet and after - last_beat >= beat:
                scheduler._heartbeat()  # what the LoopingCall of a running reactor calls
                last_beat = after
            if request is None:
                scheduler.has_pending_requests()  # the engine asks before it idles
                time.sleep(0.005)  # the engine's next call after an empty pop
                continue
            enqueue_page(scheduler, self.mode, self.site(request.url))
            if start <= time.monotonic() < end:
                self.pages += 1
                self.served[host_of(request.url)] += 1


def worker_main(
    mode: str,
    redis_url: str,
    threads: int,
    seeds: list[str],
    site: Callable[[str], list[str]] = hub_links,
    extra: dict[str, Any] | None = None,
) -> None:
    """Open ``threads`` schedulers (``extra`` settings), enqueue ``seeds``, say ready, crawl
    ``site`` in the window read from stdin, print JSON."""
    schedulers = [build_scheduler(mode, redis_url, extra=extra) for _ in range(threads)]
    if seeds:
        from scrapy import Request

        for url in seeds:
            schedulers[0].enqueue_request(Request(url))
        if mode == "crawlfleet-batch":
            schedulers[0]._flush_pending()
    print("ready", flush=True)
    start, end = (float(t) for t in sys.stdin.readline().split())
    workers = [SimulatedWorker(s, mode, (start, end), site) for s in schedulers]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    served: Counter[str] = Counter()
    for worker in workers:
        served.update(worker.served)
    out = {
        "pages": sum(w.pages for w in workers),
        "served": dict(served),
        "latencies": [x for w in workers for x in w.latencies],
        "errors": [w.error for w in workers if w.error],
    }
    print(json.dumps(out), flush=True)


def memory_main(mode: str, redis_url: str, n: int) -> None:
    """used_memory deltas: n requests queued (with their fingerprints), then popped and acked."""
    import redis
    from scrapy import Request

    client = redis.Redis.from_url(redis_url)
    scheduler = build_scheduler(mode, redis_url)

    def used() -> int:
        return int(client.info("memory")["used_memory"])

    empty = used()
    for i in range(n):
        scheduler.enqueue_request(Request(f"{SITE}{100_000 + i}"))
        if mode == "crawlfleet-batch" and i % 12 == 11:
            scheduler._flush_pending()
    if mode == "crawlfleet-batch":
        scheduler._flush_pending()
    queued = used()
    popped = sum(scheduler.next_request() is not None for _ in range(n))
    scheduler.close("finished")  # crawlfleet: acknowledges the last prefetched batch
    drained = used()
    print(json.dumps({"empty": empty, "queued": queued, "drained": drained, "popped": popped}))


# -- the bench (run by tests/bench/run.py) ----------------------------------------------------


def spawn(python: str, args: list[str], script: str = __file__) -> subprocess.Popen[str]:
    """``python script args…`` (this file's worker and memory modes by default), pipes open."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "project")}
    return subprocess.Popen(
        [python, str(Path(script).resolve()), *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def snapshot(client: Any) -> tuple[float, int, int]:
    """Redis CPU seconds, commands called (script-inner included, INFO excluded), time (ns)."""
    info = client.info("all")
    calls = sum(
        int(v["calls"]) for k, v in info.items() if k.startswith("cmdstat_") and k != "cmdstat_info"
    )
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"]), calls, time.time_ns()


def measure_window(
    procs: list[subprocess.Popen[str]],
    probe: Callable[[], Any],
    warmup: float,
    span: float,
    what: str,
) -> tuple[list[dict[str, Any]], Any, Any]:
    """Wait for the worker processes' "ready", give them the window (after ``warmup``, ``span``
    seconds) and call ``probe`` (e.g. ``snapshot`` of the Redis) at its start and end; the
    workers' JSON results and the two probes. The processes are killed if anything fails."""
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"{what} worker failed to start: {proc.stderr.read()[-2000:]}")
        start = time.monotonic() + warmup
        end = start + span
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start} {end}\n")
            proc.stdin.flush()
        time.sleep(max(0.0, start - time.monotonic()))  # a timed window, not a wait for a state
        before = probe()
        time.sleep(max(0.0, end - time.monotonic()))
        after = probe()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"{what} worker failed: {err[-2000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    errors = [e for r in results for e in r["errors"]]
    if errors:
        raise RuntimeError(f"{what}: {len(errors)} worker(s) failed, first: {errors[0]}")
    if not sum(r["pages"] for r in results):
        raise RuntimeError(f"{what} crawled no page in the window")
    return results, before, after


def latency_ms(results: list[dict[str, Any]]) -> tuple[float, float]:
    """p50 and p99 of the workers' ``next_request`` latencies, in ms."""
    latencies = sorted(x for r in results for x in r["latencies"])
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return statistics.median(latencies) * 1000, p99 * 1000


def _load(ctx: Any, python: str, mode: str, workers: int, warmup: float, span: float) -> Any:
    server = ctx.start_redis()
    procs = [
        spawn(python, ["worker", mode, server.url, str(workers // PROCESSES), str(int(i == 0))])
        for i in range(PROCESSES)
    ]
    client = server.client()
    try:
        what = f"{mode} with {workers} workers"
        results, (cpu0, calls0, t0), (cpu1, calls1, t1) = measure_window(
            procs, lambda: snapshot(client), warmup, span, what
        )
    finally:
        client.close()
        server.stop()
    pages = sum(r["pages"] for r in results)
    wall = (t1 - t0) / 1e9
    p50, p99 = latency_ms(results)
    return {
        "pages": pages,
        "rate": pages / wall,
        "cpu_us": (cpu1 - cpu0) / pages * 1e6,
        "busy": (cpu1 - cpu0) / wall,
        "commands": (calls1 - calls0) / pages,
        "p50_ms": p50,
        "p99_ms": p99,
    }


def _memory(ctx: Any, python: str, mode: str, n: int) -> dict[str, float]:
    server = ctx.start_redis()
    try:
        proc = spawn(python, ["memory", mode, server.url, str(n)])
        out, err = proc.communicate(timeout=300)
    finally:
        server.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} memory run failed: {err[-2000:]}")
    m = json.loads(out.strip().splitlines()[-1])
    if m["popped"] != n:
        raise RuntimeError(f"{mode} memory run popped {m['popped']} of {n} requests")
    return {
        "per_request": (m["queued"] - m["drained"]) / n,
        "per_fingerprint": (m["drained"] - m["empty"]) / n,
    }


def run(ctx: Any) -> list[dict[str, Any]]:
    warmup, span = (2.0, 4.0) if ctx.quick else (4.0, 10.0)
    n_memory = 5_000 if ctx.quick else 20_000
    pythons = {CRAWLFLEET: sys.executable, BATCHED: sys.executable, PEER: str(ctx.peer_python)}
    rows: list[dict[str, Any]] = []
    note = f"{PROCESSES} processes of threads, {span:g} s window after {warmup:g} s warm-up"
    for name, mode in MODES.items():
        for workers in WORKERS:
            r = _load(ctx, pythons[name], mode, workers, warmup, span)
            print(f"   {name}, {workers} workers: {json.dumps(r)}", flush=True)
            scenario = f"{name}, {workers} workers"
            rows += [
                row(scenario, "Redis CPU per page", r["cpu_us"], "µs", note),
                row(
                    scenario,
                    "Redis commands per page",
                    r["commands"],
                    "commands",
                    "inside Lua included",
                ),
                row(scenario, "pages/s", r["rate"], "pages/s", f"{r['pages']} pages"),
                row(scenario, "Redis busy", r["busy"], "cores", "1.0 = one core saturated"),
                row(
                    scenario,
                    "pages/s one Redis core serves",
                    1e6 / r["cpu_us"],
                    "pages/s",
                    "1 s ÷ Redis CPU per page",
                ),
                row(scenario, "next_request p50", r["p50_ms"], "ms"),
                row(scenario, "next_request p99", r["p99_ms"], "ms"),
            ]
        m = _memory(ctx, pythons[name], mode, n_memory)
        print(f"   {name}, memory: {json.dumps(m)}", flush=True)
        rows += [
            row(
                name, "Redis memory per queued request", m["per_request"], "B", SITE + "<6 digits>"
            ),
            row(name, "Redis memory per fingerprint", m["per_fingerprint"], "B", "set dupefilter"),
        ]
    return rows


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        seeds = [f"{SITE}0"] if sys.argv[5] == "1" else []
        worker_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), seeds)
    elif sys.argv[1] == "memory":
        memory_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        raise SystemExit(f"usage: {sys.argv[0]} worker|memory …")
