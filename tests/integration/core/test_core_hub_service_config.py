"""The hub services' shared rules, run as an operator runs them (subprocesses on loopback).

Issue 21 items 2 and 6, issue 17's exit-code defect:

- a Redis password written as ``?password=`` or in the user position never reaches the
  unauthenticated ``/health``, the start logs or an error line of the proxy pool, account pool
  and dashboard; a pool reply that echoes the API key is masked in ``status --json`` and in
  the dashboard's ``/api/status``;
- every service exits 2 with one line (no traceback) on a bad value: unparsable URLs name their
  flag, integers are digits only, numbers are bounded; the proxy pool refuses its key as a
  flag and reads it from the environment or a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import scrapy
from scrapy.utils.test import get_crawler
from support.lifecycle import running
from support.net import free_port
from support.sites import QuietHandler, serve_http, url_of
from support.waiting import wait_until

from crawlfleet.accountpool.crypto import generate_key
from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.hub.errors import RedisConfigError

from redis_server import RedisServer, start_redis

ROOT = Path(__file__).resolve().parents[3]
SECRET = "hubS3cret!"
QUOTED = quote(SECRET, safe="")
API_KEY = "hub-config-test-key-0123456789"
POOL_KEY = "pool-key-echoed-back-0123456789"
PREFIXES = ("PROXYPOOL_", "ACCOUNTPOOL_", "DASHBOARD_", "DEMOSITE_", "REDIS_URL")
SERVE = {
    "proxypool": ["proxypool", "serve", "--no-fetch", "--no-test", "--log-level", "info"],
    "accountpool": ["accountpool", "serve", "--no-generator", "--no-tester"],
    "dashboard": ["dashboard", "--sample-interval", "0.5"],
}


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
    env.update(PYTHONPATH=str(ROOT / "project"), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", *argv],
        env=base_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def no_secret(text: str, *secrets: str) -> None:
    for secret in (SECRET, QUOTED, *secrets):
        assert secret not in text, text


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server whose password is SECRET."""
    yield from running(start_redis(tmp_path, password=SECRET))


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def launch(kind: str, redis_url: str, *extra: str, **env: str) -> Running:
        port = free_port()
        log = tmp_path / f"{kind}-{len(started)}.log"
        argv = [*SERVE[kind], "--port", str(port), *extra]
        env = {"REDIS_URL": redis_url, "ACCOUNTPOOL_SECRET_KEY": generate_key(), **env}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "crawlfleet.cli", *argv],
                env=base_env(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        running = Running(process, f"http://127.0.0.1:{port}", log)
        started.append(running)

        def up() -> bool:
            assert process.poll() is None, running.text()
            try:
                return httpx.get(f"{running.url}/health", timeout=2).status_code in (200, 503)
            except httpx.HTTPError:
                return False

        wait_until(up, f"{kind} to answer /health")
        return running

    yield launch
    for launched in started:
        launched.process.terminate()
        launched.process.wait(timeout=20)


@pytest.mark.parametrize("kind", sorted(SERVE))
def test_health_and_start_log_show_no_password(
    kind: str, locked_redis: RedisServer, start: Callable[..., Running]
) -> None:
    # redis-py's form for unix:// URLs, here on TCP: the password in the query string.
    url = f"redis://127.0.0.1:{locked_redis.port}/0?password={QUOTED}"
    service = start(kind, url)
    health = httpx.get(f"{service.url}/health", timeout=5)
    assert health.status_code == 200, health.text
    no_secret(health.text)
    assert "password" not in health.text and "***" not in health.text
    assert f"127.0.0.1:{locked_redis.port}/0" in health.text
    wait_until(lambda: str(locked_redis.port) in service.text(), f"{kind}'s start line")
    no_secret(service.text())


@pytest.mark.parametrize("kind", sorted(SERVE))
def test_password_in_the_user_position_is_never_shown(kind: str, locked_redis: RedisServer) -> None:
    # redis-py sends a lone user-position value as a user name: Redis refuses it, and the
    # service stops with one line (bad configuration), showing no part of the value.
    url = f"redis://{QUOTED}@127.0.0.1:{locked_redis.port}/0"
    result = run(*SERVE[kind], "--port", str(free_port()), REDIS_URL=url, **secret_key())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "password" in lines[0] and "***@127.0.0.1" in lines[0]
    no_secret(result.stderr + result.stdout)


def secret_key() -> dict[str, str]:
    return {"ACCOUNTPOOL_SECRET_KEY": generate_key()}


BAD = "redis://[bad"
BAD_POOL = "http://[bad"
DOWN = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("argv", "env", "needles"),
    [
        (["proxypool", "serve", "--redis-url", BAD], {}, ["--redis-url", "Invalid IPv6 URL"]),
        (["proxypool", "serve", "--port", "1e3"], {}, ["--port", "must be an integer"]),
        (["proxypool", "serve", "--api-key", API_KEY], {}, ["PROXYPOOL_API_KEY", "ps"]),
        (["proxypool", "serve"], {"PROXYPOOL_API_KEY": "short"}, ["at least 16 characters"]),
        (["proxypool", "serve", "--max-count", "1e9"], {}, ["--max-count", "between 1 and"]),
        (["accountpool", "serve", "--port", "1e3"], {}, ["--port", "must be an integer"]),
        (["accountpool", "serve", "--concurrency", "1e9"], {}, ["--concurrency", "1000"]),
        (["accountpool", "serve", "--redis-url", BAD], {}, ["--redis-url", "Invalid IPv6 URL"]),
        (["accountpool", "serve"], {"ACCOUNTPOOL_API_KEY": "short"}, ["at least 16"]),
        (["accountpool", "serve", "--timeout", "1e400"], {}, ["--timeout", "<= 3600"]),
        (["dashboard", "--redis-url", BAD], {}, ["--redis-url", "Invalid IPv6 URL"]),
        (["dashboard", "--proxypool-url", BAD_POOL], {}, ["--proxypool-url", "not a valid URL"]),
        (["dashboard", "--port", "1e3"], {}, ["--port", "must be an integer"]),
        (["dashboard"], {"DASHBOARD_API_KEY": "k"}, ["DASHBOARD_API_KEY", "at least 16"]),
        (["demosite", "--books", "1000000000"], {}, ["--books", "at most 1e+06"]),
        (["demosite", "--port", "1e3"], {}, ["--port/DEMOSITE_PORT must be an integer"]),
        (["demosite", "--latency-ms", "1e308"], {}, ["--latency-ms", "at most 60000"]),
        (["demosite", "--workers", "1000"], {}, ["--workers/DEMOSITE_WORKERS", "between 1 and 64"]),
        (["status", "--redis-url", BAD], {}, ["REDIS_URL (--redis-url)", "Invalid IPv6 URL"]),
        (["status", "--redis-url", DOWN, "--proxypool-url", BAD_POOL], {}, ["--proxypool-url"]),
        (["status", "--redis-url", DOWN, "--interval", "nan"], {}, ["--interval"]),
        (["check", "--redis-url", BAD], {}, ["REDIS_URL", "Invalid IPv6 URL"]),
        (["check", "--redis-url", DOWN, "--proxypool-url", BAD_POOL], {}, ["--proxypool-url"]),
    ],
)
def test_bad_values_exit_2_with_one_line(
    argv: list[str], env: dict[str, str], needles: list[str]
) -> None:
    result = run(*argv, **{**secret_key(), **env})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    no_secret(result.stderr, API_KEY)


def test_a_runtime_failure_exits_1(redis_url: str) -> None:
    # Redis unreachable for a one-shot run is an outage, not a configuration error.
    result = run("accountpool", "test", "--once", REDIS_URL=DOWN)
    assert result.returncode == 1, result.stderr
    assert "cannot reach Redis" in result.stderr and result.stderr.count("\n") == 1


def test_proxypool_reads_its_key_from_a_file(
    redis_url: str, tmp_path: Path, start: Callable[..., Running]
) -> None:
    key_file = tmp_path / "proxypool.key"
    key_file.write_text(API_KEY + "\n")
    pool = start("proxypool", redis_url, PROXYPOOL_API_KEY_FILE=str(key_file))
    assert httpx.get(f"{pool.url}/count").status_code == 401
    assert httpx.get(f"{pool.url}/count", headers={"X-API-Key": API_KEY}).status_code == 200
    assert API_KEY not in pool.text()
    both = run(
        "proxypool",
        "serve",
        "--api-key-file",
        str(key_file),
        PROXYPOOL_API_KEY=API_KEY,
    )
    assert both.returncode == 2 and "set only one of PROXYPOOL_API_KEY" in both.stderr


class _EchoKey(QuietHandler):
    """A pool that refuses every request, quoting the key it was sent (raw and URL-quoted)."""

    def do_GET(self) -> None:
        sent = self.headers.get("X-API-Key", "")
        self.reply(
            401, f"key {sent!r} refused (as sent: {quote(sent, safe='')})".encode(), "text/plain"
        )


@pytest.fixture
def echo_pool() -> Iterator[str]:
    with serve_http(_EchoKey) as server:
        yield url_of(server)


def test_pool_replies_echoing_the_key_are_masked(
    redis_url: str, echo_pool: str, start: Callable[..., Running]
) -> None:
    keys = {"PROXYPOOL_API_KEY": POOL_KEY, "ACCOUNTPOOL_API_KEY": POOL_KEY}
    pools = ["--proxypool-url", echo_pool, "--accountpool-url", echo_pool]
    status = run("status", "--json", "--redis-url", redis_url, *pools, **keys)
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    for name in ("proxypool", "accountpool"):
        assert "HTTP 401" in view["pools"][name]["error"] and "***" in view["pools"][name]["error"]
    no_secret(status.stdout, POOL_KEY, quote(POOL_KEY, safe=""))
    text = run("status", "--redis-url", redis_url, *pools, **keys)
    assert text.returncode == 0 and "HTTP 401" in text.stdout
    no_secret(text.stdout, POOL_KEY)

    dash = start("dashboard", redis_url, *pools, DASHBOARD_API_KEY=API_KEY, **keys)
    answer = httpx.get(f"{dash.url}/api/status", headers={"X-API-Key": API_KEY}, timeout=10)
    assert answer.status_code == 200 and "HTTP 401" in answer.text
    no_secret(answer.text, POOL_KEY, API_KEY)


class _Spider(scrapy.Spider):
    name = "cfg"


@pytest.mark.parametrize(
    "form", ["redis://127.0.0.1:{port}/0?password={pw}", "redis://{pw}@127.0.0.1:{port}/0"]
)
def test_frontier_cannot_start_line_shows_no_password(form: str, locked_redis: RedisServer) -> None:
    # The worker logs "Frontier cannot start: <this message>" (frontier/base.py).
    for port in (free_port(), locked_redis.port):  # unreachable, then refusing the credentials
        # A wrong password (the right one with a suffix): Redis refuses it.
        url = form.format(port=port, pw=QUOTED + "x")
        crawler = get_crawler(_Spider, {"REDIS_URL": url})
        crawler.spider = crawler._create_spider()
        with pytest.raises(RedisConfigError) as info:
            Scheduler.from_crawler(crawler)
        message = str(info.value)
        assert f"127.0.0.1:{port}" in message and "\n" not in message
        no_secret(message)
