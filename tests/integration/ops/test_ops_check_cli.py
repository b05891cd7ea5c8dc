"""`crawlfleet check` as Ansible runs it (a subprocess), against real servers on loopback.

A hub Redis with a password, the real proxy and account pools (subprocesses, started the way the
book tests start them), a port with nothing listening, a port that accepts and never answers,
and a port whose accept queue is full (its SYNs are dropped: what a firewall's DROP looks like).
Every run is checked for leaked secrets.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from support.lifecycle import running
from support.net import free_port
from support.services import Service

from redis_server import RedisServer, start_redis

ROOT = Path(__file__).resolve().parents[3]
CRAWLFLEET = str(Path(sys.executable).parent / "crawlfleet")
HOST = socket.gethostname()
PASSWORD = "hub-pass-7c1e9a"
WRONG_PASSWORD = "not-the-hub-pass-42"
PROXY_KEY = "proxy-key-3f9b2d"
ACCOUNT_KEY = "account-key-8e4a61"
WRONG_KEY = "wrong-key-5d0c77"
SECRETS = (PASSWORD, WRONG_PASSWORD, PROXY_KEY, ACCOUNT_KEY, WRONG_KEY)
TIMEOUT = "0.5"


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def lines(self) -> list[str]:
        return self.out.strip().splitlines()


def base_env() -> dict[str, str]:
    """This environment without anything the check reads, nor HTTP proxies."""
    drop = ("REDIS_URL", "PROXYPOOL_", "ACCOUNTPOOL_")
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(drop) and not k.lower().endswith("_proxy")
    }


def check(*args: str, **env: str) -> Result:
    """``crawlfleet check ARGS`` with ``env`` added; asserts no secret shows up anywhere."""
    start = time.monotonic()
    proc = subprocess.run(
        [CRAWLFLEET, "check", *args],
        capture_output=True,
        text=True,
        env={**base_env(), **env},
        timeout=60,
    )
    result = Result(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
    for secret in SECRETS:
        assert secret not in proc.stdout + proc.stderr, f"a secret leaked: {result}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return result


def masked(server: RedisServer) -> str:
    return f"redis://:***@127.0.0.1:{server.port}/0"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from running(start_redis(tmp_path_factory.mktemp("hub"), password=PASSWORD))


def start_proxypool(tmp: Path, redis_url: str) -> Service:
    port = free_port()
    argv = [CRAWLFLEET, "proxypool", "serve", "--port", str(port), "--redis-url", redis_url]
    argv += ["--no-fetch", "--no-test", "--log-level", "warning"]
    env = {**base_env(), "PROXYPOOL_API_KEY": PROXY_KEY}
    health = f"http://127.0.0.1:{port}/health"
    return Service("proxypool", argv, env, tmp / "proxypool.log", health).start()


def pool_url(service: Service) -> str:
    return service.health.removesuffix("/health")


@pytest.fixture(scope="module")
def pools(hub: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Both pools on the hub's Redis, keys in their environment (never on a command line)."""
    tmp = tmp_path_factory.mktemp("pools")
    proxypool = start_proxypool(tmp, hub.url)
    port = free_port()
    argv = [CRAWLFLEET, "accountpool", "serve", "--port", str(port), "--redis-url", hub.url]
    argv += ["--no-generator", "--no-tester", "--log-level", "warning"]
    env = {
        **base_env(),
        "ACCOUNTPOOL_API_KEY": ACCOUNT_KEY,
        "ACCOUNTPOOL_SECRET_KEY": Fernet.generate_key().decode(),
    }
    health = f"http://127.0.0.1:{port}/health"
    accountpool = Service("accountpool", argv, env, tmp / "accountpool.log", health).start()
    yield {"PROXYPOOL_URL": pool_url(proxypool), "ACCOUNTPOOL_URL": pool_url(accountpool)}
    accountpool.stop()
    proxypool.stop()


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """Accepts connections (the kernel completes them) and never answers a byte."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server


@pytest.fixture
def silent_port(silent_server: socket.socket) -> int:
    return int(silent_server.getsockname()[1])


def connections_made(server: socket.socket) -> int:
    """How many connections reached ``server``'s accept queue (accepts and closes them)."""
    server.setblocking(False)
    made = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return made
        conn.close()
        made += 1


@pytest.fixture
def full_port() -> Iterator[int]:
    """A listener whose accept queue is full: new connections get no SYN-ACK at all."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = int(server.getsockname()[1])
        fillers: list[socket.socket] = []
        try:
            for _ in range(8):
                filler = socket.socket()
                filler.settimeout(0.3)
                try:
                    filler.connect(("127.0.0.1", port))
                except TimeoutError:
                    filler.close()
                    break  # the queue is full now
                fillers.append(filler)
            else:
                pytest.fail("the accept queue of a listen(0) socket never filled")
            yield port
        finally:
            for filler in fillers:
                filler.close()


def test_every_check_passes(hub: RedisServer, pools: dict[str, str]) -> None:
    env = {**pools, "PROXYPOOL_API_KEY": PROXY_KEY, "ACCOUNTPOOL_API_KEY": ACCOUNT_KEY}
    result = check(REDIS_URL=hub.url, **env)
    assert result.code == 0, result
    assert result.err == ""
    redis_line, proxy_line, account_line = result.lines
    assert redis_line.startswith(f"ok   redis {masked(hub)} (PONG in ")
    assert proxy_line.startswith(f"ok   proxypool {pools['PROXYPOOL_URL']}/count (0 proxies, ")
    assert account_line.startswith(
        f"ok   accountpool {pools['ACCOUNTPOOL_URL']}/demosite/count (0 valid tokens for demosite"
    )
    # The write probe cleaned up after itself.
    client = hub.client()
    assert client.exists(f"crawlfleet:check:{HOST}") == 0
    client.close()

    report = json.loads(check("--json", "--redis-url", hub.url, **env).out)
    assert report["host"] == HOST and report["ok"] is True
    assert [c["name"] for c in report["checks"]] == ["redis", "proxypool", "accountpool"]
    for entry in report["checks"]:
        assert set(entry) == {"name", "target", "ok", "detail", "seconds"}
        assert entry["ok"] is True and 0 < entry["seconds"] < 5


def test_wrong_or_missing_password(hub: RedisServer) -> None:
    wrong = hub.url.replace(PASSWORD, WRONG_PASSWORD)
    result = check(REDIS_URL=wrong)
    assert result.code == 1
    assert result.lines == [f"FAIL redis {masked(hub)} from {HOST}: wrong password (REDIS_URL)"]

    bare = f"redis://127.0.0.1:{hub.port}/0"
    result = check("--json", "--redis-url", bare)
    assert result.code == 1
    report = json.loads(result.out)
    assert report["ok"] is False and report["host"] == HOST
    assert report["checks"] == [
        {
            "name": "redis",
            "target": bare,
            "ok": False,
            "detail": "wrong password (REDIS_URL): Redis requires one and the URL has none",
            "seconds": report["checks"][0]["seconds"],
        }
    ]


def test_nothing_listening_is_refused() -> None:
    port = free_port()
    result = check(REDIS_URL=f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    assert result.code == 1
    assert result.lines == [
        f"FAIL redis redis://:***@127.0.0.1:{port}/0 from {HOST}: "
        f"refused: is redis-server running and listening on that address?"
    ]


def no_answer(port: int) -> list[str]:
    return [
        f"FAIL redis redis://:***@127.0.0.1:{port}/0 from {HOST}: no answer within 0.5 s: "
        f"is the hub up, and does its firewall admit this host ({HOST})?"
    ]


def test_silent_hub_times_out_without_retrying(silent_server: socket.socket) -> None:
    port = int(silent_server.getsockname()[1])
    result = check("--timeout", TIMEOUT, REDIS_URL=f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    assert result.code == 1
    assert result.lines == no_answer(port)
    assert connections_made(silent_server) == 1  # one try: no retries behind the timeout


def test_dropped_syns_time_out(full_port: int) -> None:
    # Nothing to count on a port that drops SYNs: the run is compared with one that fails at once
    # (a refused port) beside it, so only the check's own waiting shows, whatever the load.
    refused = check("--timeout", TIMEOUT, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    assert refused.code == 1
    result = check("--timeout", TIMEOUT, REDIS_URL=f"redis://:{PASSWORD}@127.0.0.1:{full_port}/0")
    assert result.code == 1
    assert result.lines == no_answer(full_port)
    # bounded by the timeout, not by the kernel's two-minute connect timeout
    assert result.seconds < 2 * refused.seconds + 20 * float(TIMEOUT)


def test_redis_that_would_lose_writes_fails(own_redis: RedisServer) -> None:
    client = own_redis.client()
    client.replicaof("127.0.0.1", free_port())  # a replica is read-only, its primary irrelevant
    result = check(REDIS_URL=own_redis.url)
    assert result.code == 1
    assert result.lines == [
        f"FAIL redis {own_redis.url} from {HOST}: read-only replica: REDIS_URL must name the "
        f"hub's primary (the frontier writes on every request)"
    ]

    client.replicaof("NO", "ONE")
    client.config_set("maxmemory", "64mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    result = check(REDIS_URL=own_redis.url)
    assert result.code == 1
    assert result.lines == [
        f"FAIL redis {own_redis.url} from {HOST}: maxmemory-policy is allkeys-lru with "
        f"maxmemory 64.00M: Redis may evict frontier keys and lose requests; "
        f"set maxmemory-policy noeviction"
    ]

    client.close()


def test_pool_keys_and_site(hub: RedisServer, pools: dict[str, str]) -> None:
    proxy_count = f"{pools['PROXYPOOL_URL']}/count"
    result = check(
        REDIS_URL=hub.url, PROXYPOOL_API_KEY=WRONG_KEY, ACCOUNTPOOL_API_KEY=WRONG_KEY, **pools
    )
    assert result.code == 1
    assert result.lines[1:] == [
        f"FAIL proxypool {proxy_count} from {HOST}: "
        f"the proxy pool refused the API key (PROXYPOOL_API_KEY)",
        f"FAIL accountpool {pools['ACCOUNTPOOL_URL']}/demosite/count from {HOST}: "
        f"the account pool refused the API key (ACCOUNTPOOL_API_KEY)",
    ]
    assert result.lines[0].startswith("ok   redis")

    result = check(
        "--accountpool-site", "nosuch", REDIS_URL=hub.url, ACCOUNTPOOL_API_KEY=ACCOUNT_KEY, **pools
    )
    assert result.code == 1
    assert result.lines[1:] == [
        f"FAIL proxypool {proxy_count} from {HOST}: "
        f"the proxy pool wants an API key: set PROXYPOOL_API_KEY",
        f"FAIL accountpool {pools['ACCOUNTPOOL_URL']}/nosuch/count from {HOST}: "
        f"the account pool has no site 'nosuch' (ACCOUNTPOOL_SITE or --accountpool-site; "
        f"it knows: demosite)",
    ]


def test_pool_unreachable(hub: RedisServer, silent_port: int) -> None:
    dead = free_port()
    result = check(
        "--timeout",
        TIMEOUT,
        "--proxypool-url",
        f"http://127.0.0.1:{dead}",
        REDIS_URL=hub.url,
        PROXYPOOL_API_KEY=PROXY_KEY,
        ACCOUNTPOOL_URL=f"http://127.0.0.1:{silent_port}/",
        ACCOUNTPOOL_API_KEY=ACCOUNT_KEY,
    )
    assert result.code == 1
    assert result.lines[1:] == [
        f"FAIL proxypool http://127.0.0.1:{dead}/count from {HOST}: "
        f"refused: is the proxy pool running and listening on that address?",
        f"FAIL accountpool http://127.0.0.1:{silent_port}/demosite/count from {HOST}: "
        f"no answer within 0.5 s: is the hub up, and does its firewall admit this host ({HOST})?",
    ]


def test_pool_whose_redis_is_down(hub: RedisServer, own_redis: RedisServer, tmp_path: Path) -> None:
    proxypool = start_proxypool(tmp_path, own_redis.url)
    try:
        own_redis.stop()
        result = check(
            REDIS_URL=hub.url, PROXYPOOL_URL=pool_url(proxypool), PROXYPOOL_API_KEY=PROXY_KEY
        )
    finally:
        proxypool.stop()
    assert result.code == 1
    line = result.lines[1]
    where = f"FAIL proxypool {pool_url(proxypool)}/count from {HOST}"
    assert line.startswith(f"{where}: the proxy pool is down: HTTP 503: "), line
    assert f"127.0.0.1:{own_redis.port}" in line  # the pool says which Redis it misses


def test_usage_error_is_one_line_and_status_2(hub: RedisServer) -> None:
    result = check("--timeout", "0", REDIS_URL=hub.url)
    assert (result.code, result.out) == (2, "")
    assert (
        result.err == "crawlfleet check: error: --timeout must be a number of seconds > 0, got 0\n"
    )
