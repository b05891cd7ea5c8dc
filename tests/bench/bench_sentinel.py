"""Sentinel benchmark: what ``WAIT`` and TLS cost the frontier, and what a failover costs a worker.

Side by side in one run on two Sentinel groups (a primary, two replicas, three Sentinels on
loopback; one plain, one TLS-only with ``tls-replication``): new-request enqueues per second, then
pops (``next_request``, the scheduler's own batches) of the same requests, straight to the primary,
through Sentinel without ``WAIT``, and with ``SCHEDULER_WAIT_REPLICAS`` 1 and 2 (the scheduler
driven directly, one request per enqueue round trip), with and without TLS. Then the plain
group's primary is killed with SIGKILL while a worker enqueues, and the time from the kill to its
first enqueue Redis took again is reported.

Run by ``make bench`` (tests/bench/run.py); ``bench_sentinel.py enqueue|failover …`` is the worker
subprocess it starts (a process of its own, as a Scrapy worker is).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchrow import Section
from support.secureredis import make_tls_files
from support.sentinel import start_sentinel_group

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "Sentinel failover (issue 18)"
row = Section(SECTION).row


def _scheduler(redis_url: str, wait: int) -> Any:
    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from crawlfleet.frontier.scheduler import Scheduler

    settings = {
        "REDIS_URL": redis_url,
        "DUPEFILTER_CLASS": "crawlfleet.frontier.dupefilter.SetDupeFilter",
        "SCHEDULER_WAIT_REPLICAS": wait,
        "POLITENESS_ENABLED": False,  # the frontier alone, as in bench_hub
        "REDIS_PARAMS": {"socket_timeout": 2, "socket_connect_timeout": 2},
    }
    crawler = get_crawler(type("BenchSpider", (Spider,), {"name": f"bench{wait}"}), settings)
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler


def enqueue(redis_url: str, wait: int, n: int) -> dict[str, float]:
    """Enqueues of ``n`` new requests per second, one round trip each; then pops of them."""
    from scrapy import Request

    scheduler = _scheduler(redis_url, wait)
    started = time.perf_counter()
    for i in range(n):
        scheduler.enqueue_request(Request(f"https://bench.test/{os.getpid()}/{i}"))
    seconds = time.perf_counter() - started
    assert not scheduler._pending, "an enqueue failed during the measurement"
    popped, started = 0, time.perf_counter()
    while popped < n:
        if scheduler.next_request() is None:
            raise RuntimeError(f"the queue ran dry after {popped} of {n} pops")
        popped += 1
    pop_seconds = time.perf_counter() - started
    scheduler.close("finished")
    return {"per_s": n / seconds, "pop_per_s": n / pop_seconds}


def failover(redis_url: str, ready: str, limit: float) -> dict[str, list[float]]:
    """Enqueue until ``limit`` seconds; wall-clock (start, end) of each enqueue Redis took."""
    from scrapy import Request

    scheduler = _scheduler(redis_url, 1)
    took: list[float] = []
    i = 0
    Path(ready).touch()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        i += 1
        started = time.time()
        scheduler.enqueue_request(Request(f"https://bench.test/f/{i}"))
        if scheduler._pending:
            scheduler._pending.clear()  # refused during the switch: the next one is a new try
        else:
            took += [started, time.time()]
    return {"took": took}


def _worker(args: list[str], result: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'project'}{os.pathsep}{ROOT / 'tests'}"}
    return subprocess.Popen(
        [sys.executable, str(Path(__file__)), *args, str(result)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _finish(proc: subprocess.Popen[bytes], result: Path, timeout: float) -> dict[str, Any]:
    _, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"bench worker failed: {err.decode()[-2000:]}")
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def run(ctx: Any) -> list[dict[str, Any]]:
    n = 500 if ctx.quick else 5000
    work = Path(ctx.workdir) / "sentinel"
    shutil.rmtree(work, ignore_errors=True)  # no data or Sentinel state of an earlier run
    group = start_sentinel_group(work / "group")
    secure = None
    rows: list[dict[str, Any]] = []
    try:
        secure = start_sentinel_group(work / "tls", tls=make_tls_files(work / "ca"))
        ca = secure.tls.ca_cert if secure.tls else ""
        plain_direct = f"redis://:{group.password}@127.0.0.1:{group.primary_port()}/1"
        tls_direct = (
            f"rediss://:{secure.password}@127.0.0.1:{secure.primary_port()}/1?ssl_ca_certs={ca}"
        )
        runs = [
            ("redis:// to the primary", plain_direct, 0),
            ("redis+sentinel://, no WAIT", group.url(2), 0),
            ("redis+sentinel://, WAIT 1 (default)", group.url(3), 1),
            ("redis+sentinel://, WAIT 2", group.url(4), 2),
            ("rediss:// (TLS) to the primary", tls_direct, 0),
            ("rediss+sentinel:// (TLS), no WAIT", secure.url(2), 0),
            ("rediss+sentinel:// (TLS), WAIT 1 (default)", secure.url(3), 1),
        ]
        # interleaved and repeated, the best run of each kept: the machine is shared
        best: dict[int, dict[str, float]] = {}
        for attempt in range(1 if ctx.quick else 3):
            for index, (_, url, wait) in enumerate(runs):
                result = work / f"enqueue-{index}-{attempt}.json"
                argv = ["enqueue", url, str(wait), str(n)]
                data = _finish(_worker(argv, result), result, 180)
                kept = best.setdefault(index, {"per_s": 0.0, "pop_per_s": 0.0})
                for key in kept:
                    kept[key] = max(kept[key], data[key])
        note = f"{n} requests, best of {1 if ctx.quick else 3}"
        for index, (name, _, _) in enumerate(runs):
            rates = best[index]
            rows.append(row(name, "new-request enqueues per second", rates["per_s"], "1/s"))
            rows.append(row(name, "latency per enqueue", 1e6 / rates["per_s"], "µs", note))
            rows.append(row(name, "pops per second (next_request)", rates["pop_per_s"], "1/s"))
        for label, a, b, what in (
            ("WAIT 1 vs no WAIT", 2, 1, "SCHEDULER_WAIT_REPLICAS=1 against 0, same Sentinel group"),
            ("TLS vs plain, to the primary", 4, 0, "rediss:// against redis://, no WAIT"),
            ("TLS vs plain, Sentinel WAIT 1", 6, 2, "rediss+sentinel:// against redis+sentinel://"),
        ):
            for key, kind in (("per_s", "enqueue"), ("pop_per_s", "pop")):
                ratio = best[a][key] / best[b][key]
                rows.append(row(label, f"{kind} throughput ratio", ratio, "ratio", what))
        ready, result = work / "failover.ready", work / "failover.json"
        proc = _worker(["failover", group.url(5), str(ready), "15"], result)
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(1.0)  # a second of steady enqueues before the kill
        group.kill_primary()
        killed = time.time()  # the primary is gone: it was reaped before this line
        data = _finish(proc, result, 60)
        took = data["took"]
        # the first enqueue sent after the kill that Redis took (and WAIT confirmed)
        after = [end for start, end in zip(took[::2], took[1::2], strict=True) if start > killed]
        if not after:
            raise RuntimeError("no enqueue succeeded after the failover")
        rows.append(
            row(
                "SIGKILL of the primary",
                "kill to first enqueue Redis took",
                after[0] - killed,
                "s",
                "down-after-milliseconds 1000; Sentinel quorum 2 of 3",
            )
        )
    finally:
        group.stop()
        if secure is not None:
            secure.stop()
    return rows


def main() -> None:
    mode, *args, result = sys.argv[1:]
    data: dict[str, Any]
    if mode == "enqueue":
        data = enqueue(args[0], int(args[1]), int(args[2]))
    else:
        data = failover(args[0], args[1], float(args[2]))
    Path(result).write_text(json.dumps(data))


if __name__ == "__main__":
    main()
