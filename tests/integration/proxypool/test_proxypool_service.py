"""The service as operators run it: one process with every loop, SIGTERM, Redis going away and
coming back, concurrent reports over HTTP, loops in separate processes, start-up failures."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import redis
from proxypool_helpers import (
    EchoSite,
    PoolProcess,
    ProxyFarm,
    list_site,
)
from support.net import free_port
from support.services import stop_process, wait_listening
from support.waiting import wait_until

if TYPE_CHECKING:
    from redis_server import RedisServer

StartPool = Callable[..., PoolProcess]


def scores(url: str, headers: dict[str, str]) -> dict[str, int]:
    response = httpx.get(f"{url}/all?format=json", headers=headers, timeout=5)
    return {d["proxy"]: d["score"] for d in response.json()} if response.status_code == 200 else {}


def test_one_process_fetches_tests_serves_and_stops_on_sigterm(
    pool_service: StartPool,
    redis_url: str,
    echo_site: EchoSite,
    proxy_farm: ProxyFarm,
    dead_proxy: str,
) -> None:
    live = proxy_farm.start("127.0.0.2")
    with list_site({"/list": (200, f"{live.address}\n{dead_proxy}\nrubbish\n")}) as site:
        pool = pool_service(
            "--redis-url",
            redis_url,
            "--source-url",
            f"{site}/list",
            "--test-url",
            f"{echo_site.url}/ip",
            "--fetch-interval",
            "60",
            "--test-interval",
            "0.2",
            "--test-timeout",
            "2",
            "--score-step",
            "5",
        )
        # The dead proxy enters at 10 and loses 5 per round; the live one reaches 100.
        wait_until(
            lambda: scores(pool.url, pool.headers) == {live.url: 100},
            what="live proxy at 100 and dead one gone",
        )
    random = httpx.get(f"{pool.url}/random", headers=pool.headers, timeout=5)
    assert (random.status_code, random.text) == (200, live.address)

    assert pool.stop() == 0
    log = pool.log()
    fetch_lines = [line for line in log.splitlines() if "event=fetch_cycle " in line]
    test_lines = [line for line in log.splitlines() if "event=test_cycle " in line]
    assert fetch_lines and "lines=3 invalid=1 added=2" in fetch_lines[0]
    assert any("removed=1" in line for line in test_lines)
    assert all("tested=" in line and "pool_size=" in line for line in test_lines)
    assert "event=stopping signal=SIGTERM" in log
    assert log.rstrip().splitlines()[-1].endswith("event=stopped command=serve")
    assert "Traceback" not in log


def test_redis_down_answers_503_and_recovers(
    pool_service: StartPool,
    own_redis: RedisServer,
    echo_site: EchoSite,
    proxy_farm: ProxyFarm,
) -> None:
    live = proxy_farm.start("127.0.0.3")
    pool = pool_service(
        "--redis-url",
        own_redis.url,
        "--proxy",
        live.url,
        "--test-url",
        f"{echo_site.url}/ip",
        "--fetch-interval",
        "0.3",
        "--test-interval",
        "0.3",
    )
    headers = pool.headers
    wait_until(lambda: scores(pool.url, headers) == {live.url: 100}, what="proxy tested")

    own_redis.stop()
    random = httpx.get(f"{pool.url}/random", headers=headers, timeout=10)
    assert random.status_code == 503
    assert random.text.startswith(f"Redis unreachable at redis://127.0.0.1:{own_redis.port}/0")
    assert "Error 111 connecting" in random.text  # the cause: connection refused
    health = httpx.get(f"{pool.url}/health", timeout=10)
    assert health.status_code == 503
    assert health.json()["status"] == "error" and "Redis unreachable" in health.json()["redis"]
    report = httpx.post(f"{pool.url}/report", json={"proxy": live.address}, headers=headers)
    assert report.status_code == 503 and "Redis unreachable" in report.json()["error"]
    assert httpx.get(f"{pool.url}/count", headers=headers).status_code == 503
    metrics = httpx.get(f"{pool.url}/metrics")
    assert metrics.status_code == 200 and "proxypool_redis_up 0.0" in metrics.text
    wait_until(
        lambda: (
            "event=test_cycle_failed" in pool.log() and "event=fetch_cycle_failed" in pool.log()
        ),
        what="both loops to fail a cycle",
    )
    assert pool.process.poll() is None

    own_redis.start()
    wait_until(
        lambda: httpx.get(f"{pool.url}/random", headers=headers, timeout=10).text == live.address,
        what="recovery after Redis came back",
    )
    assert httpx.get(f"{pool.url}/health", timeout=10).json()["status"] == "ok"
    assert pool.stop() == 0
    assert "Traceback" not in pool.log()


def test_concurrent_reports_on_one_proxy(
    pool_service: StartPool, redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.zadd("proxypool:proxies", {"http://10.0.0.1:80": 100, "http://10.0.0.2:80": 100})
    pool = pool_service("--redis-url", redis_url, "--no-fetch", "--no-test", "--report-step", "3")

    async def hammer() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=pool.url, headers=pool.headers) as client:
            return await asyncio.gather(
                *(client.post("/report", json={"proxy": "10.0.0.1:80"}) for _ in range(40)),
                *(client.post("/report", data={"proxy": "10.0.0.2:80"}) for _ in range(20)),
            )

    responses = asyncio.run(hammer())
    first, second = responses[:40], responses[40:]
    # 100 / 3: 33 reports leave 1, the 34th removes it, 6 find it gone; nothing goes below 0.
    assert sorted(r.status_code for r in first) == [200] * 34 + [404] * 6
    assert sum(r.json().get("removed", False) for r in first) == 1
    assert all(r.status_code == 200 for r in second)
    assert redis_client.zscore("proxypool:proxies", "http://10.0.0.1:80") is None
    assert redis_client.zscore("proxypool:proxies", "http://10.0.0.2:80") == 40.0
    assert pool.stop() == 0


def test_loops_in_separate_processes(
    pool_service: StartPool,
    redis_url: str,
    echo_site: EchoSite,
    proxy_farm: ProxyFarm,
    dead_proxy: str,
) -> None:
    live = proxy_farm.start("127.0.0.2")
    api = pool_service("--redis-url", redis_url, "--no-fetch", "--no-test")
    fetcher = pool_service(
        "--redis-url",
        redis_url,
        "--proxy",
        live.url,
        "--proxy",
        dead_proxy,
        "--fetch-interval",
        "0.3",
        command="fetch",
    )
    tester = pool_service(
        "--redis-url",
        redis_url,
        "--test-url",
        f"{echo_site.url}/ip",
        "--test-interval",
        "0.3",
        command="test",
    )
    wait_until(lambda: scores(api.url, api.headers).get(live.url) == 100, what="tested by peer")
    metrics = httpx.get(f"{api.url}/metrics").text
    passed = [
        line
        for line in metrics.splitlines()
        if line.startswith('proxypool_tests_total{result="passed"}')
    ]
    assert passed and float(passed[0].split()[-1]) >= 1  # counted by the tester process
    for process in (fetcher, tester, api):
        assert process.stop() == 0
    assert "event=fetch_cycle " in fetcher.log() and "event=test_cycle " in tester.log()


def test_sigterm_interrupts_a_long_test_round(
    pool_service: StartPool, redis_url: str, echo_site: EchoSite, proxy_farm: ProxyFarm
) -> None:
    hanging = proxy_farm.start("127.0.0.4", silent=True)
    tester = pool_service(
        "--redis-url",
        redis_url,
        "--proxy",
        hanging.url,
        "--test-url",
        f"{echo_site.url}/ip",
        "--test-timeout",
        "60",
        "--test-interval",
        "0.2",
        command="serve",
    )
    wait_until(lambda: hanging.requests > 0, what="the test round to start")
    started = time.monotonic()
    assert tester.stop() == 0
    assert time.monotonic() - started < 8  # far less than the 60 s test timeout
    assert "event=test_cycle_interrupted" in tester.log()


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.proxypool.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_start_up_failures_are_one_line(redis_url: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = run_cli("serve", "--port", str(port), "--redis-url", redis_url, "--no-test")
    assert busy.returncode == 1
    assert "event=no_sources" in busy.stderr  # serve with a fetch loop and nothing to fetch
    assert busy.stderr.splitlines()[-1] == (
        f"crawlfleet proxypool serve: error: cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    )
    exposed = run_cli("serve", "--host", "0.0.0.0", "--redis-url", redis_url)
    assert exposed.returncode == 2 and len(exposed.stderr.splitlines()) == 1
    assert "without an API key" in exposed.stderr
    unreachable = run_cli(
        "test",
        "--once",
        "--redis-url",
        "redis://:pw@127.0.0.1:1/0",
        "--test-url",
        "http://127.0.0.1:1/",
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.splitlines()[-1].startswith(
        "crawlfleet proxypool test: error: cannot reach Redis at redis://:***@127.0.0.1:1/0"
    )
    assert "pw@" not in unreachable.stderr


def test_wrong_redis_password_is_a_configuration_error(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--requirepass",
            "right",
            "--save",
            "",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_listening(server, "127.0.0.1", port)
        wrong = f"redis://:wrong@127.0.0.1:{port}/0"
        done = run_cli("serve", "--redis-url", wrong, "--no-test", "--port", str(free_port()))
    finally:
        stop_process(server)
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert last.startswith("crawlfleet proxypool serve: error: Redis at redis://:***@127.0.0.1")
    assert "wrong" not in done.stderr


def test_sigint_stops_too(pool_service: StartPool, redis_url: str) -> None:
    pool = pool_service("--redis-url", redis_url, "--no-fetch", "--no-test")
    pool.process.send_signal(signal.SIGINT)
    assert pool.process.wait(timeout=10) == 0
    assert "event=stopping signal=SIGINT" in pool.log()
