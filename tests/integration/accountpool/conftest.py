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
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis
from support.net import free_port
from support.services import start_process, stop_process, wait_healthy, wait_listening

from crawlfleet.accountpool.adapters import SiteAdapter, build_adapter
from crawlfleet.accountpool.crypto import PasswordBox, generate_key
from crawlfleet.accountpool.generator import Generator
from crawlfleet.accountpool.sites import load_sites
from crawlfleet.accountpool.store import AccountStore
from crawlfleet.accountpool.tester import Tester
from crawlfleet.service.logs import JsonFormatter

# Every password a test gives the pool; none may appear in any captured log line.
PASSWORDS: set[str] = set()
SECRET_KEY = generate_key()
API_KEY = "test-api-key-" + secrets.token_hex(8)
ADMIN_SECRET = "demo-admin-secret"


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
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        accounts_file = self.workdir / "demo-accounts.txt"
        accounts_file.write_text("".join(f"{u}:{p}\n" for u, p in self.accounts.items()))
        log_path = self.workdir / "demosite.log"
        self.process = start_process(
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
            log_path,
        )
        wait_healthy(
            self.process,
            f"{self.url}/health",
            log_path,
            timeout=20,
            accept=lambda response: response.status_code == 200,
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

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
    port = free_port()
    process = start_process(
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
        ],
        tmp_path / "locked-redis.log",
    )
    wait_listening(process, "127.0.0.1", port, tmp_path / "locked-redis.log")
    yield port
    stop_process(process)


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for ``crawlfleet accountpool`` subprocesses: the test secret key only."""
    return service_env()


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    services: list[Service] = []

    def make(redis_url: str, site_url: str, *args: str, api_key: str | None = API_KEY) -> Service:
        port = free_port()
        log_path = tmp_path / f"accountpool-{port}.log"
        env = service_env(REDIS_URL=redis_url)
        if api_key is not None:
            env["ACCOUNTPOOL_API_KEY"] = api_key
        process = start_process(
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
            log_path,
            env=env,
        )
        service = Service(port, process, log_path)
        services.append(service)
        wait_healthy(process, f"{service.url}/health", log_path, timeout=20)
        return service

    yield make
    for service in services:
        stop_process(service.process)
        _assert_no_password(service.log_path.read_text(), f"the service log {service.log_path}")
