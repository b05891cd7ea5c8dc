"""The book tests' lab: the demo site, forward proxies, both pools and crawl workers, each a real
process on loopback that the test can stop and start again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis
from cryptography.fernet import Fernet
from support.net import free_port
from support.services import Service, start_process
from support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
PROJECT = ROOT / "project"
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
PROXY_KEY = "proxypool-test-key-0123456789"
ACCOUNT_KEY = "accountpool-test-key-0123456789"
ADMIN_SECRET = "demosite-admin-secret"
JWT_SECRET = "demosite-jwt-secret-for-the-book-tests!"
ACCOUNTS = {"reader1": "pw-one", "reader2": "pw-two", "reader3": "pw-three"}


@dataclass
class Lab:
    tmp: Path
    redis_url: str
    services: list[Service] = field(default_factory=list)
    site_url: str = ""
    proxies: list[str] = field(default_factory=list)
    proxy_services: list[Service] = field(default_factory=list)
    proxypool: Service | None = None
    accountpool: Service | None = None
    worker_env: dict[str, str] = field(default_factory=dict)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_proxy")}
        env.update(REDIS_URL=self.redis_url, PYTHONUNBUFFERED="1")
        env.update(extra)
        return env

    def _service(self, name: str, argv: list[str], health: str, env: dict[str, str]) -> Service:
        service = Service(name, argv, env, self.tmp / f"{name}.log", health).start()
        self.services.append(service)
        return service

    def start_demosite(self, *flags: str, books: int = 300) -> str:
        port = free_port()
        accounts = ",".join(f"{u}:{p}" for u, p in ACCOUNTS.items())
        argv = [
            str(BIN / "crawlfleet"),
            "demosite",
            "--port",
            str(port),
            "--books",
            str(books),
            "--accounts",
            accounts,
            "--admin-secret",
            ADMIN_SECRET,
            "--jwt-secret",
            JWT_SECRET,
            "--log-level",
            "warning",
            *flags,
        ]
        self.site_url = f"http://127.0.0.1:{port}"
        self._service("demosite", argv, f"{self.site_url}/health", self.env())
        return self.site_url

    def start_proxies(
        self, sources: tuple[str, ...] = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    ) -> None:
        for source in sources:
            port = free_port()
            argv = [
                sys.executable,
                str(HERE / "book_forward_proxy.py"),
                "--port",
                str(port),
                "--source",
                source,
            ]
            # A forward proxy has no health URL of its own: it is up once it listens.
            log = self.tmp / f"proxy-{source}.log"
            service = Service(f"proxy-{source}", argv, self.env(), log, port=port).start(10.0)
            self.services.append(service)
            self.proxy_services.append(service)
            self.proxies.append(f"127.0.0.1:{port}")

    def start_proxypool(self, port: int | None = None) -> str:
        port = port or free_port()
        argv = [
            str(BIN / "crawlfleet"),
            "proxypool",
            "serve",
            "--port",
            str(port),
            "--redis-url",
            self.redis_url,
            "--test-url",
            f"{self.site_url}/ip",
            # the site refusing an address for a while is the politeness budget's business (per
            # site and proxy), not the proxy's health: the proxy answered
            "--test-status",
            "200,403,429",
            "--fetch-interval",
            "1",
            "--test-interval",
            "1",
            "--test-timeout",
            "3",
            "--log-level",
            "warning",
        ]
        for proxy in self.proxies:
            argv += ["--proxy", proxy]
        # The key comes from the environment: the proxy pool refuses it as a flag (ps shows it).
        self.proxypool = self._service(
            "proxypool",
            argv,
            f"http://127.0.0.1:{port}/health",
            self.env(PROXYPOOL_API_KEY=PROXY_KEY),
        )
        url = f"http://127.0.0.1:{port}"
        _wait_nonempty(f"{url}/random", PROXY_KEY)
        return url

    def start_accountpool(self, *flags: str, port: int | None = None) -> str:
        port = port or free_port()
        key = Fernet.generate_key().decode()  # what `crawlfleet accountpool keygen` prints
        env = self.env(ACCOUNTPOOL_SECRET_KEY=key, ACCOUNTPOOL_API_KEY=ACCOUNT_KEY)
        argv = [
            str(BIN / "crawlfleet"),
            "accountpool",
            "serve",
            "--port",
            str(port),
            "--redis-url",
            self.redis_url,
            "--site-url",
            f"demosite={self.site_url}",
            "--generate-interval",
            "1",
            "--test-interval",
            "1",
            "--backoff-base",
            "1",
            "--log-level",
            "info",
            *flags,
        ]
        self.accountpool = self._service(
            "accountpool", argv, f"http://127.0.0.1:{port}/health", env
        )
        url = f"http://127.0.0.1:{port}"
        accounts = [{"username": u, "password": p} for u, p in ACCOUNTS.items()]
        httpx.post(
            f"{url}/demosite/accounts",
            json={"accounts": accounts},
            headers={"X-API-Key": ACCOUNT_KEY},
            trust_env=False,
        ).raise_for_status()
        _wait_nonempty(f"{url}/demosite/random", ACCOUNT_KEY)
        return url

    def crawl_env(self, proxypool_url: str, accountpool_url: str) -> dict[str, str]:
        """The worker environment of docs/design.md, Contracts (also kept as ``worker_env``)."""
        self.worker_env = self.env(
            BOOK_SITE_URL=self.site_url,
            PROXYPOOL_URL=proxypool_url,
            PROXYPOOL_API_KEY=PROXY_KEY,
            ACCOUNTPOOL_URL=accountpool_url,
            ACCOUNTPOOL_API_KEY=ACCOUNT_KEY,
            PYTHONPATH=os.pathsep.join([str(PROJECT), str(HERE)]),
        )
        return self.worker_env

    def start_worker(
        self, name: str, env: dict[str, str], *settings: str
    ) -> tuple[subprocess.Popen[bytes], Path]:
        stats = self.tmp / f"{name}.stats.json"
        argv = [
            str(BIN / "scrapy"),
            "crawl",
            "book",
            "-s",
            f"BOOK_STATS_FILE={stats}",
            "-s",
            'EXTENSIONS={"book_stats_file.StatsToFile": 0}',
            "-s",
            "LOG_LEVEL=INFO",
        ]
        for setting in settings:
            argv += ["-s", setting]
        proc = start_process(argv, self.tmp / f"{name}.log", env=env, cwd=PROJECT)
        return proc, stats

    def admin(self, path: str, body: dict[str, object] | None = None) -> dict[str, object]:
        headers = {"X-Admin-Secret": ADMIN_SECRET}
        if body is None:
            resp = httpx.get(f"{self.site_url}{path}", headers=headers, trust_env=False)
        else:
            resp = httpx.post(f"{self.site_url}{path}", json=body, headers=headers, trust_env=False)
        resp.raise_for_status()
        result: dict[str, object] = resp.json()
        return result

    def admin_delete(self, path: str) -> None:
        httpx.delete(
            f"{self.site_url}{path}", headers={"X-Admin-Secret": ADMIN_SECRET}, trust_env=False
        ).raise_for_status()

    def close(self) -> None:
        for service in reversed(self.services):
            service.stop()


def _wait_nonempty(url: str, key: str, timeout: float = 30.0) -> None:
    def serves() -> bool:
        try:
            resp = httpx.get(url, headers={"X-API-Key": key}, timeout=2.0, trust_env=False)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200 and bool(resp.text.strip())

    wait_until(serves, f"{url} to have something to serve", timeout=timeout, interval=0.2)


def read_stats(path: Path) -> dict[str, object]:
    stats: dict[str, object] = json.loads(path.read_text())
    return stats


CRAWL_SETTINGS = (
    "SCHEDULER_IDLE_BEFORE_CLOSE=2",
    "PROXYPOOL_QUARANTINE=2",
    "PROXYPOOL_REFRESH_INTERVAL=1",
    "PROXYPOOL_BACKOFF_MAX=2",
    "ACCOUNTPOOL_BACKOFF_MAX=2",
)


def wait_workers(
    workers: list[tuple[subprocess.Popen[bytes], Path]], timeout: float = 180.0
) -> list[dict[str, object]]:
    """Wait for every worker to exit 0 (killing them all after ``timeout``); their stats."""
    deadline = time.monotonic() + timeout
    for proc, _ in workers:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other, _ in workers:
                other.kill()
            raise AssertionError(
                f"crawl did not finish within {timeout} s\n{_log_tails(workers)}"
            ) from None
    codes = [proc.returncode for proc, _ in workers]
    assert codes == [0] * len(workers), f"exit codes {codes}\n{_log_tails(workers)}"
    return [read_stats(stats) for _, stats in workers]


def _log_tails(workers: list[tuple[subprocess.Popen[bytes], Path]], lines: int = 25) -> str:
    """The end of each worker's log (the logs live in a temporary directory)."""
    tails = []
    for _, stats in workers:
        log = stats.with_name(stats.name.replace(".stats.json", ".log"))
        text = log.read_text(errors="replace").splitlines() if log.exists() else []
        tails.append(f"--- {log.name}\n" + "\n".join(text[-lines:]))
    return "\n".join(tails)


def export(redis_url: str, out: Path) -> tuple[list[dict[str, object]], str]:
    """Run ``crawlfleet export book``; the exported items and its message."""
    proc = subprocess.run(
        [
            str(BIN / "crawlfleet"),
            "export",
            "book",
            "-o",
            str(out),
            "--redis-url",
            redis_url,
            "--quiet",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    items = [json.loads(line) for line in out.read_text().splitlines()]
    return items, proc.stdout.strip()


def wait_items(redis_url: str, count: int, timeout: float = 60.0) -> None:
    """Block until the items stream has at least ``count`` entries."""
    client = redis.Redis.from_url(redis_url)
    wait_until(lambda: client.xlen("book:items") >= count, f"{count} items", timeout=timeout)
    client.close()
