"""Connecting through Sentinel: the pools' asyncio clients reach the primary; a service no
Sentinel knows, no Sentinel reachable and a wrong ``sentinel_password`` are one line each — from
``crawlfleet status``, ``crawlfleet check`` and the scheduler at start."""

from __future__ import annotations

import asyncio

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler
from support.net import free_port
from support.sentinel import SentinelGroup

from crawlfleet.cli import main
from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.hub.connect import get_async_redis
from crawlfleet.hub.errors import RedisConfigError, RedisUrlError


def unreachable_url() -> str:
    return f"redis+sentinel://:pw-unseen@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/crawl/0"


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("command", ["status", "check"])
def test_unknown_service_is_one_line(
    steady_group: SentinelGroup, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = steady_group.url(service="nope")
    code = main([command, "--redis-url", url])
    captured = capsys.readouterr()
    line = one_line(captured.err if command == "status" else captured.out)
    assert code != 0
    assert "no Sentinel at 127.0.0.1:" in line and "knows a service 'nope'" in line
    assert "they know: crawl" in line
    assert steady_group.password not in line and steady_group.sentinel_password not in line


@pytest.mark.parametrize("command", ["status", "check"])
def test_no_sentinel_reachable_is_one_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([command, "--redis-url", unreachable_url()])
    captured = capsys.readouterr()
    line = one_line(captured.err if command == "status" else captured.out)
    assert code != 0
    assert "no Sentinel reachable at 127.0.0.1:" in line and "(REDIS_URL)" in line
    assert "pw-unseen" not in line


def test_scheduler_start_names_the_missing_service(steady_group: SentinelGroup) -> None:
    crawler = get_crawler(settings_dict={"REDIS_URL": steady_group.url(service="nope")})
    with pytest.raises(RedisUrlError) as info:
        Scheduler.from_crawler(crawler)
    assert "knows a service 'nope'" in one_line(str(info.value))


def test_scheduler_start_without_sentinels_is_one_line() -> None:
    crawler = get_crawler(settings_dict={"REDIS_URL": unreachable_url()})
    with pytest.raises(RedisConfigError) as info:
        Scheduler.from_crawler(crawler)
    assert "no Sentinel reachable" in one_line(str(info.value))
    assert "pw-unseen" not in str(info.value)


def test_wrong_sentinel_password_is_named(steady_group: SentinelGroup) -> None:
    url = steady_group.url().replace(steady_group.sentinel_password, "wrong-one")
    crawler = get_crawler(settings_dict={"REDIS_URL": url})
    with pytest.raises(RedisUrlError, match="refused sentinel_password"):
        Scheduler.from_crawler(crawler)


@pytest.mark.parametrize("blocking", [False, True], ids=["proxy pool", "account pool"])
def test_async_clients_reach_the_primary(steady_group: SentinelGroup, blocking: bool) -> None:
    async def use() -> bytes | None:
        waits = {"timeout": 2} if blocking else {}  # how long the blocking pool waits
        client = get_async_redis(
            steady_group.url(db=6 + blocking),
            blocking=blocking,
            max_connections=2 if blocking else 6,
            **waits,
        )
        try:
            await asyncio.gather(*(client.incr("hits") for _ in range(6)))
            return await client.get("hits")
        finally:
            await client.aclose()

    assert asyncio.run(use()) == b"6"


def open_scheduler(url: str, name: str, wait_replicas: int, **settings: object) -> Scheduler:
    """An open frontier scheduler of spider ``name`` that waits for ``wait_replicas``."""
    settings = {
        "REDIS_URL": url,
        "DUPEFILTER_CLASS": "crawlfleet.frontier.dupefilter.SetDupeFilter",
        "SCHEDULER_WAIT_REPLICAS": wait_replicas,
        "POLITENESS_ENABLED": False,
        **settings,
    }
    crawler = get_crawler(type(name.title(), (Spider,), {"name": name}), settings)
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler


def test_an_enqueue_too_few_replicas_confirm_is_kept_and_sent_again(
    steady_group: SentinelGroup,
) -> None:
    # the group has two replicas
    scheduler = open_scheduler(steady_group.url(db=8), "waits", 3, SCHEDULER_WAIT_TIMEOUT=0.2)
    try:
        scheduler.enqueue_request(Request("https://a.test/1"))
        assert scheduler._pending  # not acknowledged: 2 of the 3 replicas confirmed it
        scheduler.config.wait_replicas = 2
        assert scheduler._flush_pending() is not None and not scheduler._pending
        assert scheduler.client.zcard("waits:requests") == 1  # stored once
    finally:
        scheduler.close("finished")


def test_an_enqueue_waited_for_is_one_round_trip_and_survives_a_lost_script(
    steady_group: SentinelGroup,
) -> None:
    """EVALSHA and WAIT in one round trip (no SCRIPT EXISTS before them, as redis-py's script
    object in a pipeline sends); a primary that lost the script (SCRIPT FLUSH, as after a restart
    or a failover to a fresh one) answers NOSCRIPT, and the enqueue loads it and is stored once."""
    scheduler = open_scheduler(steady_group.url(db=9), "durable", 2)
    primary = steady_group.node_client(steady_group.primary_port())

    def calls(command: str) -> int:
        return int(primary.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))

    try:
        exists, waits = calls("script|exists"), calls("wait")
        scheduler.enqueue_request(Request("https://a.test/1"))
        primary.script_flush()
        scheduler.enqueue_request(Request("https://a.test/2"))
        assert not scheduler._pending  # both acknowledged by the two replicas
        assert calls("wait") >= waits + 2  # they were waited for
        assert calls("script|exists") == exists  # and never asked about the script first
        assert scheduler.client.zcard("durable:requests") == 2  # each stored once
    finally:
        scheduler.close("finished")
