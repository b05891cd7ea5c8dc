"""Crawls for the frontier tests: a small link graph served on loopback (``site``), crawl worker
subprocesses (``start_worker``, running frontier_crawl.py beside this file) and their settings.

The fixtures are registered once, by tests/conftest.py, for every test directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from support.services import log_tail, start_process, stop_process
from support.sites import QuietHandler, serve_http, url_of
from support.waiting import wait_until

CRAWL_SCRIPT = Path(__file__).with_name("frontier_crawl.py")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Site:
    """Pages ``/p/<i>`` for i < pages; page i links to i*branching+1 … i*branching+branching.

    ``/c/<i>`` is a chain (one link per page) of ``chain`` pages; ``/broken`` answers 500.
    Every hit is counted per path, so tests can check "every page, exactly once".
    """

    pages: int = 40
    branching: int = 3
    delay: float = 0.02
    chain: int = 0
    chain_delay: float = 0.3
    broken_links: int = 0
    # When set: every answer waits until it is open (a test that needs all its workers in the
    # crawl before the first page is served closes it, then opens it).
    gate: threading.Event | None = None
    hits: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def body(self, path: str) -> tuple[int, bytes, float]:
        parts = path.strip("/").split("/")
        if (
            parts[0] == "p"
            and len(parts) == 2
            and parts[1].isdigit()
            and int(parts[1]) < self.pages
        ):
            i = int(parts[1])
            links = [
                f"/p/{c}"
                for c in range(i * self.branching + 1, i * self.branching + 1 + self.branching)
                if c < self.pages
            ]
            if i > self.branching:  # a duplicate: the parent (never the dont_filter start page)
                links.append(f"/p/{(i - 1) // self.branching}")
            if i < self.broken_links:
                links.append(f"/broken/{i}")
            if i == 0 and self.chain:
                links.append("/c/0")
            return 200, _html(links), self.delay
        if (
            parts[0] == "c"
            and len(parts) == 2
            and parts[1].isdigit()
            and int(parts[1]) < self.chain
        ):
            i = int(parts[1])
            links = [f"/c/{i + 1}"] if i + 1 < self.chain else []
            return 200, _html(links), self.chain_delay
        if parts[0] == "broken":
            return 500, b"broken", 0.0
        return 404, b"not found", 0.0

    def expected(self) -> set[str]:
        return {f"/p/{i}" for i in range(self.pages)} | {f"/c/{i}" for i in range(self.chain)}

    def crawled(self) -> set[str]:
        with self.lock:
            return {p for p in self.hits if p.startswith(("/p/", "/c/"))}


def _html(links: list[str]) -> bytes:
    return (
        "<html><body>" + "".join(f'<a href="{h}">{h}</a>' for h in links) + "</body></html>"
    ).encode()


@pytest.fixture
def site() -> Iterator[Site]:
    state = Site()

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            if state.gate is not None:
                state.gate.wait(timeout=120)
            status, body, delay = state.body(self.path)
            with state.lock:
                state.hits[self.path] += 1
            if delay:
                time.sleep(delay)
            self.reply(status, body)

    with serve_http(Handler) as server:
        state.url = url_of(server)
        yield state


@dataclass
class Worker:
    """One crawl subprocess: ``out`` lists the URLs it parsed, ``result`` its reason and stats."""

    proc: subprocess.Popen[bytes]
    out: Path
    result: Path
    log: Path

    def parsed(self) -> list[str]:
        return self.out.read_text().split() if self.out.exists() else []

    def wait(self, timeout: float = 90) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"worker still running after {timeout}s; log:\n" + log_tail(self.log)
            ) from None

    def summary(self) -> dict[str, object]:
        return dict(json.loads(self.result.read_text()))


def start_two(
    start_worker: Callable[..., Worker], site: Site, settings: dict[str, object]
) -> tuple[Worker, Worker]:
    """A victim and a survivor on one crawl, returned once each has parsed three pages."""
    victim = start_worker(site.url, settings, "victim")
    survivor = start_worker(site.url, settings, "survivor")
    wait_until(
        lambda: len(victim.parsed()) >= 3 and len(survivor.parsed()) >= 3,
        what="both workers to crawl",
    )
    return victim, survivor


def start_together(
    start_worker: Callable[..., Worker],
    site: Site,
    settings: dict[str, object],
    names: list[str],
    **kwargs: object,
) -> list[Worker]:
    """Workers that all join the crawl before it serves a page (or one of them has exited).

    Started one after the other, on a loaded machine the first can finish a small crawl before
    the next has joined, and a worker that finds a finished crawl seeds it again (start requests
    are dont_filter): "started together" would then not be what the test ran."""
    site.gate = threading.Event()
    workers = [start_worker(site.url, settings, name, **kwargs) for name in names]
    client = redis.Redis.from_url(str(settings["REDIS_URL"]))
    try:
        wait_until(
            lambda: (
                client.zcard("site:workers") == len(workers)
                or any(w.proc.poll() is not None for w in workers)
            ),
            "every worker to join the crawl",
            timeout=120,
        )
    finally:
        client.close()
        site.gate.set()
    return workers


def assert_crawl_survived(site: Site, workers: list[Worker], bound: int, timeout: float) -> int:
    """After an outage of the frontier's Redis mid-crawl (a failover): every worker finished,
    having noticed and retried; every page was crawled and reached the spider, at most ``bound``
    times more than once (what was in flight). Returns how many extra crawls there were."""
    for worker in workers:
        assert worker.wait(timeout) == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    twice = {p: n for p, n in site.hits.items() if p in site.expected() and n > 1}
    assert sum(n - 1 for n in twice.values()) <= bound, twice
    parsed = Counter(path for worker in workers for path in worker.parsed())
    assert set(parsed) == site.expected()  # every page reached the spider
    assert sum(parsed.values()) - len(parsed) <= bound, parsed
    for worker in workers:
        assert worker.summary()["reason"] == "finished"
        assert "Frontier Redis" in worker.log.read_text()  # it noticed and retried
    return sum(n - 1 for n in twice.values())


POLITENESS_MIDDLEWARE = "crawlfleet.politeness.middleware.PolitenessMiddleware"


def frontier_settings(redis_url: str, **extra: object) -> dict[str, object]:
    settings: dict[str, object] = {
        "REDIS_URL": redis_url,
        "SCHEDULER": "crawlfleet.frontier.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "crawlfleet.frontier.dupefilter.SetDupeFilter",
        "SCHEDULER_LEASE_TIMEOUT": 3,
        "SCHEDULER_HEARTBEAT_INTERVAL": 0.5,
        "SCHEDULER_PREFETCH": 2,
        "CONCURRENT_REQUESTS": 4,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "RETRY_TIMES": 0,
    }
    settings.update(extra)
    # a crawl that tests the frontier alone says it wants no budget (the scheduler refuses to
    # start unpaced otherwise); one that lists the PolitenessMiddleware gets it
    middlewares = settings.get("DOWNLOADER_MIDDLEWARES") or {}
    assert isinstance(middlewares, dict)
    settings.setdefault("POLITENESS_ENABLED", POLITENESS_MIDDLEWARE in middlewares)
    return settings


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(
        site_url: str,
        settings: dict[str, object],
        name: str = "w",
        style: str = "start",
        pages: int = 0,
    ) -> Worker:
        """One worker; ``style`` is how its spider starts (frontier_crawl.py lists them)."""
        index = len(workers)
        out, result = tmp_path / f"{name}{index}.out", tmp_path / f"{name}{index}.json"
        log = tmp_path / f"{name}{index}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "project"), "SITE_PAGES": str(pages)}
        argv = [sys.executable, str(CRAWL_SCRIPT), site_url, str(out), str(result)]
        proc = start_process([*argv, json.dumps(settings), style], log, env=env, cwd=tmp_path)
        worker = Worker(proc, out, result, log)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        stop_process(worker.proc, sig=signal.SIGKILL)


def heartbeats(client: redis.Redis, spider: str = "site") -> dict[str, int]:
    """The last heartbeat (Redis clock, ms) of each worker registered for ``spider``."""
    workers = [bytes(w).decode() for w in client.zrange(f"{spider}:workers", 0, -1)]
    return {w: int(client.hget(f"{spider}:worker:{w}", "heartbeat") or 0) for w in workers}


def wait_heartbeats(
    client: redis.Redis, count: int, workers: int, spider: str = "site", timeout: float = 60
) -> None:
    """Until each of ``workers`` registered workers has sent ``count`` more heartbeats.

    A test that shows "nothing moves for a while" counts the workers' own heartbeats, so a
    slow machine stretches the while instead of shortening what the test proves.
    """
    last = heartbeats(client, spider)
    seen = dict.fromkeys(last, 0)

    def enough() -> bool:
        for worker, beat in heartbeats(client, spider).items():
            if beat != last.get(worker):
                last[worker] = beat
                seen[worker] = seen.get(worker, 0) + 1
        done = [w for w, n in seen.items() if n >= count]
        return len(done) >= workers

    wait_until(enough, f"{count} heartbeats of {workers} workers", timeout=timeout, interval=0.02)
