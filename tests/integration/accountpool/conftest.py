"""Fixtures for the account pool's integration tests: the real demo site in a subprocess, the
pool's pieces wired to real Redis, the whole service in a subprocess, and a check that no
password handed to the pool ever shows up in a log line.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from crawlfleet.accountpool.adapters import SiteAdapter, build_adapter
from crawlfleet.accountpool.crypto import PasswordBox, generate_key
from crawlfleet.accountpool.generator import Generator
from crawlfleet.accountpool.logs import JsonFormatter
from crawlfleet.accountpool.sites import load_sites
from crawlfleet.accountpool.store import AccountStore
from crawlfleet.accountpool.tester import Tester

# Every password a test gives the pool; none may appear in any captured log line.
PASSWORDS: set[str] = set()
SECRET_KEY = generate_key()
API_KEY = "test-api-key-" + secrets.token_hex(8)
ADMIN_SECRET = "demo-admin-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _assert_no_password(text: str, where: str) -> None:
    leaked = [p for p in PASSWORDS if p in text]
    assert not leaked, f"a password appeared in {where}"


@pytest.fixture
def api_key() -> str:
    """The key the service subprocesses require in X-API-Key."""
    return API_KEY


@pytest.fixture
def secret_key() -> str:
    """The Fernet key of every pool built by these fixtures."""
    return SECRET_KEY


@pytest.fixture
def password() -> Callable[[str], str]:
    """A distinctive password for ``label`` (registered for the leak check)."""

    def make(label: str) -> str:
        value = f"pw-{label}-{secrets.token_hex(6)}"
        PASSWORDS.add(value)
        return value

    return make


@pytest.fixture(autouse=True)
def no_password_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="crawlfleet")
    yield
    formatter = JsonFormatter()
    _assert_no_password("\n".join(formatter.format(r) for r in caplog.records), "a log record")


@dataclass
class DemoSite:
    """``crawlfleet demosite`` in a subprocess on a free port, restartable on the same port."""

    workdir: Path
    accounts: dict[str, str]
    token_ttl: float
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        accounts_file = self.workdir / "demo-accounts.txt"
        accounts_file.write_text("".join(f"{u}:{p}\n" for u, p in self.accounts.items()))
        log = (self.workdir / "demosite.log").open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "crawlfleet.cli",
                "demosite",
                "--port",
                str(self.port),
                "--books",
                "20",
                "--accounts",
                f"@{accounts_file}",
                "--token-ttl",
                str(self.token_ttl),
                "--admin-secret",
                ADMIN_SECRET,
                # Fixed, so tokens survive a restart of the site ("site down, then up").
                "--jwt-secret",
                "demo-jwt-secret-for-tests-0123456789",
                "--log-level",
                "warning",
            ],
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "demosite exited; see demosite.log"
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("demosite did not answer /health within 20 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def admin(self, path: str, body: dict[str, object] | None = None) -> dict[str, object]:
        headers = {"X-Admin-Secret": ADMIN_SECRET}
        if body is None:
            response = httpx.get(f"{self.url}/api/admin/{path}", headers=headers)
        else:
            response = httpx.post(f"{self.url}/api/admin/{path}", json=body, headers=headers)
        response.raise_for_status()
        result: dict[str, object] = response.json()
        return result

    def requests_served(self) -> int:
        return int(self.admin("stats")["requests"])  # type: ignore[call-overload]


@pytest.fixture
def demosite_factory(tmp_path: Path) -> Iterator[Callable[..., DemoSite]]:
    sites: list[DemoSite] = []

    def make(accounts: dict[str, str], token_ttl: float = 60) -> DemoSite:
        site = DemoSite(tmp_path, accounts, token_ttl)
        site.start()
        sites.append(site)
        return site

    yield make
    for site in sites:
        site.stop()


@dataclass
class Pool:
    store: AccountStore
    adapters: dict[str, SiteAdapter]
    client: httpx.AsyncClient
    generator: Generator
    tester: Tester


PoolFactory = Callable[..., AbstractAsyncContextManager[Pool]]


@pytest.fixture
def pool_factory(redis_url: str) -> PoolFactory:
    """Build the pool's pieces inside a test's event loop, against the real Redis and site."""

    @asynccontextmanager
    async def make(
        site_url: str,
        *,
        url: str = redis_url,
        refresh_before: float = 1.0,
        backoff_base: float = 1.0,
        backoff_max: float = 4.0,
        concurrency: int = 4,
    ) -> AsyncIterator[Pool]:
        redis = Redis.from_url(url, socket_connect_timeout=2)
        store = AccountStore(redis, PasswordBox(SECRET_KEY))
        spec = load_sites(None, {"demosite": site_url})["demosite"]
        adapters = {"demosite": build_adapter(spec)}
        async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
            generator = Generator(
                store,
                adapters,
                client,
                concurrency=concurrency,
                refresh_before=refresh_before,
                backoff_base=backoff_base,
                backoff_max=backoff_max,
            )
            tester = Tester(store, adapters, client, concurrency=concurrency)
            yield Pool(store, adapters, client, generator, tester)
        await redis.aclose()

    return make


@dataclass
class Service:
    """``crawlfleet accountpool serve`` in a subprocess."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line]


def service_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCOUNTPOOL_")}
    env.update(ACCOUNTPOOL_SECRET_KEY=SECRET_KEY, **extra)
    return env


@pytest.fixture
def locked_redis_port(tmp_path: Path) -> Iterator[int]:
    """A redis-server that requires a password (which tests deliberately do not give)."""
    port = _free_port()
    process = subprocess.Popen(
        [
            shutil.which("redis-server") or "/usr/bin/redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--requirepass",
            "locked-redis-pass",
            "--dir",
            str(tmp_path),
            "--logfile",
            str(tmp_path / "locked-redis.log"),
        ],
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield port
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for ``crawlfleet accountpool`` subprocesses: the test secret key only."""
    return service_env()


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    services: list[Service] = []

    def make(redis_url: str, site_url: str, *args: str, api_key: str | None = API_KEY) -> Service:
        port = _free_port()
        log_path = tmp_path / f"accountpool-{port}.log"
        env = service_env(REDIS_URL=redis_url)
        if api_key is not None:
            env["ACCOUNTPOOL_API_KEY"] = api_key
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "crawlfleet.cli",
                "accountpool",
                "serve",
                "--port",
                str(port),
                "--site-url",
                f"demosite={site_url}",
                "--generate-interval",
                "0.5",
                "--test-interval",
                "1",
                "--min-ttl",
                "0.5",
                "--refresh-before",
                "1",
                "--backoff-base",
                "1",
                "--backoff-max",
                "4",
                "--timeout",
                "3",
                "--log-level",
                "debug",
                *args,
            ],
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        service = Service(port, process, log_path)
        services.append(service)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert process.poll() is None, f"service exited: {log_path.read_text()}"
            try:
                httpx.get(f"{service.url}/health", timeout=1)
                return service
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("account pool did not answer within 20 s")

    yield make
    for service in services:
        if service.process.poll() is None:
            service.process.terminate()
            service.process.wait(timeout=10)
        _assert_no_password(service.log_path.read_text(), f"the service log {service.log_path}")
