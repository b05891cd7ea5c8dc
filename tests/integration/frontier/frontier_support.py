"""Frontier crawl support: a small link graph served on loopback, and crawl subprocesses.

Imported under this unique name (tests/integration/frontier/conftest.py re-exports its fixtures;
the operator tests load it too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

CRAWL_SCRIPT = Path(__file__).with_name("frontier_crawl.py")
ROOT = Path(__file__).resolve().parents[3]


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

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body, delay = state.body(self.path)
            with state.lock:
                state.hits[self.path] += 1
            if delay:
                time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


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
                f"worker still running after {timeout}s; log:\n" + self.log.read_text()[-3000:]
            ) from None

    def summary(self) -> dict[str, object]:
        return dict(json.loads(self.result.read_text()))


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
        with log.open("wb") as logf:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(CRAWL_SCRIPT),
                    site_url,
                    str(out),
                    str(result),
                    json.dumps(settings),
                    style,
                ],
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
            )
        worker = Worker(proc, out, result, log)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()


def wait_until(predicate: Callable[[], bool], timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
