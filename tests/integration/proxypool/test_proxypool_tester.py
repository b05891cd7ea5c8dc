"""The tester against real forward proxies on loopback: scoring transitions, statuses, anonymity,
timeouts and bounded concurrency."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

import pytest
import redis
from proxypool_helpers import EchoSite, ForwardProxy, ProxyFarm

from crawlfleet.proxypool.config import Settings
from crawlfleet.proxypool.store import ProxyStore, connect
from crawlfleet.proxypool.tester import AnonymityUnavailable, ProxyTester, RoundCounts

KEY = "pp:tester"


def run_rounds(redis_url: str, settings: Settings, rounds: int = 1) -> list[RoundCounts]:
    async def main() -> list[RoundCounts]:
        client = connect(redis_url)
        try:
            store = ProxyStore(client, KEY, 1000)
            tester = ProxyTester(replace(settings, redis_url=redis_url, redis_key=KEY), store)
            return [await tester.test_once() for _ in range(rounds)]
        finally:
            await client.aclose()

    return asyncio.run(main())


def scores(client: redis.Redis) -> dict[str, float]:
    return {m.decode(): s for m, s in client.zrange(KEY, 0, -1, withscores=True)}


def base_settings(echo: EchoSite, **changes: object) -> Settings:
    return replace(Settings(test_url=f"{echo.url}/ip", test_timeout=3.0), **changes)  # type: ignore[arg-type]


@dataclass
class ThreeKinds:
    live: ForwardProxy  # the farm's proxy on 127.0.0.2 (``.url``, ``.requests``)
    tinyproxy: str  # a real tinyproxy, leaving from 127.0.0.5
    dead: str  # an address where nothing listens


@pytest.fixture
def three_kinds(
    redis_client: redis.Redis, proxy_farm: ProxyFarm, tinyproxy: str, dead_proxy: str
) -> ThreeKinds:
    """A live proxy, tinyproxy and a dead one, in the pool at score 10 each."""
    kinds = ThreeKinds(proxy_farm.start("127.0.0.2"), tinyproxy, dead_proxy)
    redis_client.zadd(KEY, {kinds.live.url: 10, tinyproxy: 10, dead_proxy: 10})
    return kinds


def test_dead_falls_to_zero_and_disappears_live_reaches_100(
    redis_url: str,
    redis_client: redis.Redis,
    echo_site: EchoSite,
    proxy_farm: ProxyFarm,
    three_kinds: ThreeKinds,
) -> None:
    live, tinyproxy = three_kinds.live, three_kinds.tinyproxy
    settings = base_settings(echo_site, score_step=4)

    first, _, third = run_rounds(redis_url, settings, rounds=3)
    assert (first.tested, first.passed, first.failed, first.removed) == (3, 2, 1, 0)
    assert (third.tested, third.removed) == (3, 1)  # 10 -> 6 -> 2 -> removed
    assert scores(redis_client) == {live.url: 100.0, tinyproxy: 100.0}
    # The test traffic really went through each proxy (each connects from its own address).
    assert {"127.0.0.2", "127.0.0.5"} <= set(echo_site.clients)
    assert live.requests == 3

    # A proxy at 100 that dies loses a step per round until it is gone.
    proxy_farm.stop(live)
    rounds = run_rounds(redis_url, replace(settings, score_step=40), rounds=3)
    assert [r.failed for r in rounds] == [1, 1, 1]
    assert [r.removed for r in rounds] == [0, 0, 1]
    assert scores(redis_client) == {tinyproxy: 100.0}


def test_statuses_decide_a_pass(
    redis_url: str, redis_client: redis.Redis, echo_site: EchoSite, proxy_farm: ProxyFarm
) -> None:
    proxy = proxy_farm.start("127.0.0.3")
    redis_client.zadd(KEY, {proxy.url: 50})
    settings = base_settings(echo_site, test_url=f"{echo_site.url}/status/503")
    (result,) = run_rounds(redis_url, settings)
    assert (result.passed, result.failed) == (0, 1)
    assert scores(redis_client) == {proxy.url: 40.0}
    (result,) = run_rounds(redis_url, replace(settings, test_statuses=frozenset({200, 503})))
    assert result.passed == 1
    assert scores(redis_client) == {proxy.url: 100.0}


def test_anonymity_check_fails_proxies_that_reveal_us(
    redis_url: str, redis_client: redis.Redis, echo_site: EchoSite, proxy_farm: ProxyFarm
) -> None:
    anonymous = proxy_farm.start("127.0.0.2")
    transparent = proxy_farm.start("127.0.0.3", transparent=True)
    redis_client.zadd(KEY, {anonymous.url: 10, transparent.url: 10})
    (result,) = run_rounds(redis_url, base_settings(echo_site, anonymity_check=True))
    assert (result.passed, result.failed, result.not_anonymous) == (1, 1, 1)
    assert scores(redis_client) == {anonymous.url: 100.0}

    # Without the check, the transparent proxy is good enough.
    redis_client.zadd(KEY, {transparent.url: 10})
    (result,) = run_rounds(redis_url, base_settings(echo_site))
    assert result.passed == 2


def test_anonymity_url_that_shows_no_address_stops_the_round(
    redis_url: str, redis_client: redis.Redis, echo_site: EchoSite, proxy_farm: ProxyFarm
) -> None:
    proxy = proxy_farm.start("127.0.0.2")
    redis_client.zadd(KEY, {proxy.url: 50})
    settings = base_settings(
        echo_site, anonymity_check=True, anonymity_url="http://127.0.0.1:1/nothing-here"
    )
    with pytest.raises(AnonymityUnavailable, match="cannot fetch the anonymity URL directly"):
        run_rounds(redis_url, settings)
    assert scores(redis_client) == {proxy.url: 50.0}  # nobody punished for our problem


def test_hanging_proxy_times_out_and_concurrency_is_bounded(
    redis_url: str, redis_client: redis.Redis, echo_site: EchoSite, proxy_farm: ProxyFarm
) -> None:
    good = [proxy_farm.start("127.0.0.2") for _ in range(8)]
    hanging = proxy_farm.start("127.0.0.4", silent=True)
    redis_client.zadd(KEY, {p.url: 10 for p in [*good, hanging]})
    settings = base_settings(
        echo_site, test_url=f"{echo_site.url}/ip?delay=0.3", test_concurrency=3, test_timeout=1.0
    )
    started = time.monotonic()
    (result,) = run_rounds(redis_url, settings)
    elapsed = time.monotonic() - started
    assert (result.passed, result.failed, result.removed) == (8, 1, 1)
    assert 2 <= echo_site.max_in_flight <= 3
    assert 0.9 <= elapsed < 8  # 8 x 0.3 s over 3 slots, with the 1 s timeout in parallel
    assert hanging.url not in scores(redis_client)


def test_https_target_through_connect_tunnels(
    redis_url: str, redis_client: redis.Redis, https_echo_site: EchoSite, three_kinds: ThreeKinds
) -> None:
    """A real target is HTTPS: the tester then asks each proxy for a CONNECT tunnel."""
    live, tinyproxy = three_kinds.live, three_kinds.tinyproxy
    (result,) = run_rounds(redis_url, base_settings(https_echo_site, anonymity_check=True))
    assert (result.passed, result.failed) == (2, 1)
    assert scores(redis_client) == {live.url: 100.0, tinyproxy: 100.0}
    # The tunnels start at each proxy's own address; the first request came directly from us.
    assert https_echo_site.clients[0] == "127.0.0.1"
    assert set(https_echo_site.clients[1:]) == {"127.0.0.2", "127.0.0.5"}
