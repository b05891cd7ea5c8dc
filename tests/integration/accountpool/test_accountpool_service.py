"""The whole service as operators run it: ``crawlfleet accountpool import|serve|generate|test``
in subprocesses, against real Redis and the real demo site."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis
from support.waiting import wait_until

from crawlfleet.accountpool.crypto import generate_key


def cli(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", "accountpool", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def valid_count(service: Any, key: str) -> int:
    response = httpx.get(f"{service.url}/demosite/count", headers={"X-API-Key": key})
    return int(response.json()["count"]) if response.status_code == 200 else -1


def test_import_serve_random_report_metrics(
    redis_url: str,
    demosite_factory: Callable[..., Any],
    service_factory: Callable[..., Any],
    password: Callable[[str], str],
    api_key: str,
    secret_key: str,
    cli_env: dict[str, str],
) -> None:
    accounts = {f"user{i}": password(f"svc{i}") for i in range(4)}
    site = demosite_factory(accounts)
    env = {**cli_env, "REDIS_URL": redis_url}
    lines = (
        f"user0:{accounts['user0']}\n"
        f"broken-line-{accounts['user3']}\n"
        f"user1:{accounts['user1']}\n"
        f":{accounts['user3']}\n"
        "# comment\n"
    )
    imported = cli("import", "demosite", "-", env=env, stdin=lines)
    assert imported.returncode == 1  # lines were skipped: say so, but keep the good ones
    assert "imported 2 accounts into demosite (2 new, 0 updated)" in imported.stdout
    assert "skipped line 2: no ':'" in imported.stderr
    assert "skipped line 4: username" in imported.stderr
    assert accounts["user3"] not in imported.stdout + imported.stderr

    service = service_factory(redis_url, site.url)
    wait_until(lambda: valid_count(service, api_key) == 2, "two credentials")
    cmdline = Path(f"/proc/{service.process.pid}/cmdline").read_bytes()
    for secret in (*accounts.values(), secret_key, api_key):
        assert secret.encode() not in cmdline

    key = {"X-API-Key": api_key}
    for headers in ({}, {"X-API-Key": "wrong-key-wrong-key"}):
        assert httpx.get(f"{service.url}/demosite/random", headers=headers).status_code == 401
    response = httpx.get(f"{service.url}/demosite/random", headers=key)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/")
    token = response.text
    book = httpx.get(
        f"{site.url}/api/book/?limit=1&offset=0", headers={"Authorization": f"jwt {token}"}
    )
    assert book.status_code == 200

    unknown = httpx.get(f"{service.url}/elsewhere/random", headers=key)
    assert unknown.status_code == 404 and unknown.json()["known_sites"] == ["demosite"]

    added = httpx.post(
        f"{service.url}/demosite/accounts",
        headers=key,
        json={"accounts": [{"username": "user2", "password": accounts["user2"]}]},
    )
    assert added.json()["added"] == 1
    wait_until(lambda: valid_count(service, api_key) == 3, "the added account's credential")

    reported = httpx.post(f"{service.url}/demosite/report", headers=key, json={"token": token})
    assert reported.json()["removed"] is True
    wait_until(lambda: valid_count(service, api_key) == 3, "a fresh credential after the report")
    assert httpx.get(f"{service.url}/demosite/random", headers=key).text != token

    metrics = httpx.get(f"{service.url}/metrics").text
    ok_line = next(
        line
        for line in metrics.splitlines()
        if line.startswith('accountpool_logins_total{result="ok",site="demosite"}')
    )
    assert float(ok_line.split()[-1]) >= 4
    assert 'accountpool_reports_total{site="demosite"} 1.0' in metrics

    service.process.terminate()
    assert service.process.wait(timeout=10) == 0
    events = {line.get("event") for line in service.log_lines()}
    assert {"start", "generate_cycle", "stop"} <= events


def test_redis_down_then_back(
    own_redis: Any,
    demosite_factory: Callable[..., Any],
    service_factory: Callable[..., Any],
    password: Callable[[str], str],
    api_key: str,
    cli_env: dict[str, str],
) -> None:
    accounts = {"hank": password("hank")}
    site = demosite_factory(accounts)
    env = {**cli_env, "REDIS_URL": own_redis.url}
    assert (
        cli("import", "demosite", "-", env=env, stdin=f"hank:{accounts['hank']}\n").returncode == 0
    )
    service = service_factory(own_redis.url, site.url)
    wait_until(lambda: valid_count(service, api_key) == 1, "a credential")

    own_redis.stop()
    key = {"X-API-Key": api_key}
    down = httpx.get(f"{service.url}/demosite/random", headers=key)
    assert down.status_code == 503
    assert f"Redis unavailable at redis://127.0.0.1:{own_redis.port}/0" in down.json()["error"]
    health = httpx.get(f"{service.url}/health")
    assert health.status_code == 503 and health.json()["redis"]["ok"] is False
    wait_until(
        lambda: any(line.get("event") == "generate_error" for line in service.log_lines()),
        "the generator to log the outage",
    )
    assert service.process.poll() is None  # the service and its loops survive

    own_redis.start()
    wait_until(
        lambda: httpx.get(f"{service.url}/demosite/random", headers=key).status_code == 200,
        "recovery after Redis returns",
    )
    assert httpx.get(f"{service.url}/health").json()["status"] == "ok"


def test_service_starts_while_redis_is_down(
    demosite_factory: Callable[..., Any],
    service_factory: Callable[..., Any],
    api_key: str,
) -> None:
    site = demosite_factory({"x": "pw-unused-0"})
    service = service_factory("redis://127.0.0.1:1/0", site.url)
    response = httpx.get(f"{service.url}/demosite/count", headers={"X-API-Key": api_key})
    assert response.status_code == 503
    assert "Redis unavailable at redis://127.0.0.1:1/0" in response.json()["error"]


def test_bad_configuration_exits_2_and_an_outage_1_with_one_line(
    redis_url: str,
    cli_env: dict[str, str],
    locked_redis_port: int,
) -> None:
    env = {**cli_env, "REDIS_URL": redis_url}
    assert cli("import", "demosite", "-", env=env, stdin="a:pw-first-0\n").returncode == 0

    def fails(args: list[str], fragment: str, code: int = 2, **extra: str) -> None:
        result = cli(*args, env={**env, **extra})
        assert result.returncode == code, result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("crawlfleet accountpool: error: ")
        assert fragment in result.stderr, result.stderr

    other_key = generate_key()
    fails(["test", "--once"], "does not decrypt", ACCOUNTPOOL_SECRET_KEY=other_key)
    fails(["import", "nosite", "-"], "unknown site 'nosite' (known: demosite)")
    fails(
        ["generate", "--once"],
        "cannot reach Redis at redis://127.0.0.1:1/0",
        1,
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    fails(
        ["generate", "--once"],
        "needs a valid password",
        REDIS_URL=f"redis://127.0.0.1:{locked_redis_port}/0",
    )
    fails(
        ["generate", "--once"],
        "redis://:***@127.0.0.1",
        REDIS_URL=f"redis://:wrong-pass@127.0.0.1:{locked_redis_port}/0",
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        fails(["serve", "--port", str(port)], f"cannot listen on 127.0.0.1:{port}", 1)


def test_generate_and_test_once_from_the_command_line(
    redis_url: str,
    redis_client: redis.Redis,
    demosite_factory: Callable[..., Any],
    password: Callable[[str], str],
    cli_env: dict[str, str],
) -> None:
    accounts = {"ivan": password("ivan"), "judy": password("judy")}
    site = demosite_factory(accounts)
    env = {**cli_env, "REDIS_URL": redis_url, "ACCOUNTPOOL_SITE_URLS": f"demosite={site.url}"}
    stdin = "".join(f"{u}:{p}\n" for u, p in accounts.items())
    assert cli("import", "demosite", "-", env=env, stdin=stdin).returncode == 0
    generated = cli("generate", "--once", "--site", "demosite", env=env)
    assert generated.returncode == 0, generated.stderr
    assert redis_client.hlen("credentials:demosite") == 2
    site.admin("revoke", {"username": "ivan"})
    no_key = {k: v for k, v in env.items() if k != "ACCOUNTPOOL_SECRET_KEY"}
    tested = cli("test", "--once", env=no_key)  # the tester never needs passwords
    assert tested.returncode == 0, tested.stderr
    assert redis_client.hkeys("credentials:demosite") == [b"judy"]
    for output in (generated.stderr, tested.stderr):
        assert not any(p in output for p in accounts.values())


def test_generate_loop_stops_cleanly_on_sigterm(
    redis_url: str,
    demosite_factory: Callable[..., Any],
    password: Callable[[str], str],
    redis_client: redis.Redis,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    accounts = {"kate": password("kate")}
    site = demosite_factory(accounts)
    env = {**cli_env, "REDIS_URL": redis_url, "ACCOUNTPOOL_SITE_URLS": f"demosite={site.url}"}
    assert (
        cli("import", "demosite", "-", env=env, stdin=f"kate:{accounts['kate']}\n").returncode == 0
    )
    log_path = tmp_path / "generate.log"
    with log_path.open("wb") as log:
        loop = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "crawlfleet.cli",
                "accountpool",
                "generate",
                "--generate-interval",
                "0.2",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            wait_until(lambda: redis_client.hlen("credentials:demosite") == 1, "a login")
        finally:
            loop.send_signal(signal.SIGTERM)
            assert loop.wait(timeout=10) == 0
    assert accounts["kate"] not in log_path.read_text()
