"""`crawlfleet check` without servers: usage errors, how failures read, the output formats.

Failures are built the way redis-py and httpx raise them (the socket error as the context of
the library's own exception); pool answers are real ``httpx.Response`` objects.
"""

from __future__ import annotations

import errno
import json
import socket

import httpx
import pytest
import redis

from crawlfleet.cli import main
from crawlfleet.commands.check import (
    CheckResult,
    eviction_problem,
    network_cause,
    pool_answer,
    pool_specs,
    redis_cause,
    report_json,
)
from crawlfleet.views.pools import PoolConfig

PASSWORD = "s3cret-pw-91"
KEY = "k3y-secret-27"
HOST = "worker-b"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "PROXYPOOL_URL", "ACCOUNTPOOL_URL", "ACCOUNTPOOL_SITE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PROXYPOOL_API_KEY", KEY)
    monkeypatch.setenv("ACCOUNTPOOL_API_KEY", KEY)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "no Redis URL: pass --redis-url or set REDIS_URL"),
        (["--redis-url", f"http://:{PASSWORD}@hub/0"], "REDIS_URL must look like redis://"),
        (["--redis-url", f"redis://:{PASSWORD}@hub:port/0"], "invalid REDIS_URL"),
        (["--timeout", "0"], "--timeout must be a number of seconds > 0, got 0"),
        (["--timeout", "-1"], "got -1"),
        (["--timeout", "nan"], "got nan"),
        (["--timeout", "inf"], "got inf"),
        (["--proxypool-url", "hub:5555"], "PROXYPOOL_URL (--proxypool-url) must look like"),
        (["--proxypool-url", "http://hub:99999"], "PROXYPOOL_URL"),
        (["--accountpool-url", f"ftp://u:{PASSWORD}@hub"], "ACCOUNTPOOL_URL (--accountpool-url)"),
        (["--accountpool-site", ""], "ACCOUNTPOOL_SITE (--accountpool-site) must be a site name"),
        (["--accountpool-site", "a/b"], "must be a site name, got 'a/b'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if "--redis-url" not in argv and argv:
        argv = [*argv, "--redis-url", f"redis://:{PASSWORD}@127.0.0.1:1/0"]
    assert main(["check", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("crawlfleet check: error: "), err
    assert needle in lines[0]
    assert PASSWORD not in err and KEY not in err


def test_redis_url_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", f"rediss://:{PASSWORD}@hub:6380/0")
    assert main(["check", "--timeout", "0"]) == 2  # the URL was taken; the timeout refused
    assert "--timeout" in capsys.readouterr().err


def test_a_timeout_that_is_no_number_is_argparses_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["check", "--timeout", "soon"])
    assert stopped.value.code == 2
    assert "crawlfleet check: error: argument --timeout" in capsys.readouterr().err


def test_lines_and_json() -> None:
    ok = CheckResult("redis", "redis://:***@10.0.0.1:6379/0", True, "PONG in 1.2 ms", 0.00123)
    failed = CheckResult(
        "proxypool", "http://10.0.0.1:5555/count", False, "refused: is …?", 0.012345678
    )
    assert ok.line(HOST) == "ok   redis redis://:***@10.0.0.1:6379/0 (PONG in 1.2 ms)"
    assert failed.line(HOST) == (
        "FAIL proxypool http://10.0.0.1:5555/count from worker-b: refused: is …?"
    )
    report = json.loads(report_json(HOST, [ok, failed]))
    assert list(report) == ["host", "ok", "checks"]
    assert report["host"] == HOST and report["ok"] is False
    assert report["checks"][1] == {
        "name": "proxypool",
        "target": "http://10.0.0.1:5555/count",
        "ok": False,
        "detail": "refused: is …?",
        "seconds": 0.0123,
    }
    assert json.loads(report_json(HOST, [ok]))["ok"] is True


def raised(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` as if raised while handling ``inner`` (how the client libraries wrap sockets)."""
    outer.__context__ = inner
    return outer


URL = f"redis://:{PASSWORD}@hub.internal:6379/0"
DNS = socket.gaierror(-2, "Name or service not known")
CAUSES = {
    "dns": (
        "cannot resolve 'hub.internal' (DNS): check the host name in REDIS_URL "
        "and this host's /etc/hosts or resolver"
    ),
    "refused": "refused: is redis-server running and listening on that address?",
    "timeout": (
        "no answer within 5 s: is the hub up, and does its firewall admit this host (worker-b)?"
    ),
    "no-route": "no route to that address: is the hub up, and is its address in REDIS_URL right?",
}


@pytest.mark.parametrize(
    ("exc", "cause"),
    [
        (raised(redis.ConnectionError("Error -2 connecting"), DNS), "dns"),
        (
            raised(redis.ConnectionError("Error 111"), ConnectionRefusedError(111, "refused")),
            "refused",
        ),
        (raised(redis.TimeoutError("Timeout connecting"), TimeoutError("timed out")), "timeout"),
        (redis.TimeoutError("Timeout reading from socket"), "timeout"),
        (
            raised(
                redis.ConnectionError("Error 113 connecting"),
                OSError(errno.EHOSTUNREACH, "No route to host"),
            ),
            "no-route",
        ),
    ],
)
def test_network_causes(exc: BaseException, cause: str) -> None:
    assert redis_cause(exc, URL, 5.0, HOST) == CAUSES[cause]


def test_pool_network_causes() -> None:
    request = httpx.Request("GET", "http://pool.internal:5555/count")

    def cause(exc: BaseException, timeout: float = 5) -> str | None:
        return network_cause(
            exc,
            service="the proxy pool",
            url=str(request.url),
            env="PROXYPOOL_URL",
            timeout=timeout,
            host=HOST,
        )

    dns = raised(httpx.ConnectError("[Errno -2]", request=request), DNS)
    assert cause(dns) == (
        "cannot resolve 'pool.internal' (DNS): check the host name in PROXYPOOL_URL "
        "and this host's /etc/hosts or resolver"
    )
    slow = httpx.ReadTimeout("timed out", request=request)
    assert cause(slow, timeout=2.5) == CAUSES["timeout"].replace("5 s", "2.5 s")
    assert cause(httpx.RemoteProtocolError("Server disconnected", request=request)) is None


def test_redis_answers() -> None:
    assert redis_cause(redis.AuthenticationError("WRONGPASS …"), URL, 5, HOST) == (
        "wrong password (REDIS_URL)"
    )
    bare = "redis://hub.internal:6379/0"
    assert redis_cause(redis.ResponseError("NOAUTH Authentication required."), bare, 5, HOST) == (
        "wrong password (REDIS_URL): Redis requires one and the URL has none"
    )
    assert redis_cause(redis.ResponseError("DB index is out of range"), URL, 5, HOST) == (
        "Redis refused the connection's setup (REDIS_URL): DB index is out of range"
    )
    unix = raised(redis.ConnectionError("Error 2"), FileNotFoundError(2, "No such file"))
    assert redis_cause(unix, "unix:///run/redis.sock", 5, HOST) == (
        "no such socket: is redis-server running (check the path in REDIS_URL)?"
    )
    echoed = redis.ResponseError(f"ERR unknown thing {PASSWORD}")
    assert PASSWORD not in redis_cause(echoed, URL, 5, HOST)


def test_eviction_policy() -> None:
    assert eviction_problem({"maxmemory": 0, "maxmemory_policy": "allkeys-lru"}) is None
    assert eviction_problem({"maxmemory": 10, "maxmemory_policy": "noeviction"}) is None
    assert eviction_problem(redis.ResponseError("NOPERM")) is None
    problem = eviction_problem(
        {"maxmemory": 1 << 30, "maxmemory_human": "1.00G", "maxmemory_policy": "volatile-lru"}
    )
    assert problem == (
        "maxmemory-policy is volatile-lru with maxmemory 1.00G: Redis may evict frontier keys "
        "and lose requests; set maxmemory-policy noeviction"
    )


SPECS = pool_specs(
    PoolConfig(
        proxypool_url="http://hub:5555/",
        proxypool_api_key=KEY,
        accountpool_url="http://hub:6777",
        accountpool_api_key="",
        accountpool_site="books",
    )
)
PROXY, ACCOUNT = SPECS


def answer(status: int, **content: object) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("GET", "http://hub/"), **content)  # type: ignore[arg-type]


def test_pool_urls_are_the_ones_clusterview_counts() -> None:
    assert [s.count_url for s in SPECS] == ["http://hub:5555/count", "http://hub:6777/books/count"]
    assert pool_specs(PoolConfig()) == []


@pytest.mark.parametrize(
    ("spec", "response", "expected"),
    [
        (PROXY, answer(200, text="12\n"), (True, "12 proxies")),
        (ACCOUNT, answer(200, json={"count": 3}), (True, "3 valid tokens for books")),
        (
            PROXY,
            answer(200, text="<html>"),
            (
                False,
                "answered HTTP 200 without a count: is PROXYPOOL_URL the proxy pool's address?",
            ),
        ),
        (
            PROXY,
            answer(401, text="invalid API key"),
            (False, "the proxy pool refused the API key (PROXYPOOL_API_KEY)"),
        ),
        (
            ACCOUNT,
            answer(401, json={"error": "missing X-API-Key header"}),
            (False, "the account pool wants an API key: set ACCOUNTPOOL_API_KEY"),
        ),
        (
            ACCOUNT,
            answer(404, json={"error": "unknown site", "known_sites": ["demosite", "shop"]}),
            (
                False,
                "the account pool has no site 'books' (ACCOUNTPOOL_SITE or --accountpool-site; "
                "it knows: demosite, shop)",
            ),
        ),
        (
            ACCOUNT,
            answer(503, json={"error": "Redis unavailable at redis://:***@hub:6379/0: refused"}),
            (
                False,
                "the account pool is down: HTTP 503: "
                "Redis unavailable at redis://:***@hub:6379/0: refused",
            ),
        ),
        (PROXY, answer(502, text=""), (False, "the proxy pool is down: HTTP 502")),
        (
            PROXY,
            answer(404, text="Not Found"),
            (
                False,
                "unexpected answer HTTP 404: Not Found: is PROXYPOOL_URL the proxy pool's address?",
            ),
        ),
        (
            PROXY,
            answer(500, text=f"bad key {KEY}\nmore"),
            (False, "the proxy pool is down: HTTP 500: bad key ***"),
        ),
    ],
)
def test_pool_answers(spec: object, response: httpx.Response, expected: tuple[bool, str]) -> None:
    assert pool_answer(spec, response) == expected  # type: ignore[arg-type]
