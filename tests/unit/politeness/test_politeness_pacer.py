"""crawlfleet.politeness.pacer on a real redis-server with an injected clock: which buffered
request and which proxy go first, cool-downs, order within a key, Crawl-delay split, the switch,
no slot while the ProxyMiddleware has no proxy yet."""

from __future__ import annotations

import math
import random

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from scrapy import Request
from scrapy.utils.test import get_crawler

from crawlfleet.politeness.budget import Budget, Outcome
from crawlfleet.politeness.config import Limits, PolitenessConfig, PolitenessConfigError
from crawlfleet.politeness.pacer import (
    HANDOUT_SLACK,
    META_PROXY,
    META_SLOT,
    META_SLOT_UNTIL,
    Choice,
    Pacer,
    build_pacer,
)

P1, P2, P3 = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"
MIDDLEWARE = {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750}


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pacer(client: redis.Redis, clock: Clock, rate: float = 10.0, lease: int = 4) -> Pacer:
    config = PolitenessConfig(
        limits=Limits(rate, rate, rate, 1), lease_size=lease, cooldown=20.0, namespace="p"
    )
    return Pacer(Budget(client, config, clock=clock))


def test_without_proxies_a_waiting_key_yields_to_another(redis_client: redis.Redis) -> None:
    clock = Clock()
    p = pacer(redis_client, clock, rate=2.0, lease=1)
    a1, a2 = Request("http://a.example/1"), Request("http://a.example/2")
    b1 = Request("http://b.example/1")
    first = p.choose([a1, a2, b1])
    assert (first.index, first.key, first.proxy) == (0, "a.example", None)
    assert a1.meta[META_SLOT] == "a.example" and META_PROXY not in a1.meta
    # its slot's window is 0.5 s; the middlewares before the PolitenessMiddleware get 50 ms of it
    assert a1.meta[META_SLOT_UNTIL] == pytest.approx(clock.now + HANDOUT_SLACK)
    # a.example's next slot is 0.5 s away: b.example goes now, not a2
    second = p.choose([a2, b1])
    assert (second.index, second.key) == (1, "b.example")
    third = p.choose([a2])
    assert third.index is None and third.wait == pytest.approx(0.5)
    clock.now += 0.5
    assert p.choose([a2]).index == 0


def test_order_within_a_key_is_kept(redis_client: redis.Redis) -> None:
    clock = Clock()
    p = pacer(redis_client, clock, rate=1000.0, lease=8)
    requests = [Request(f"http://a.example/{i}") for i in range(5)]
    handed = []
    while requests:
        choice = p.choose(requests)
        assert choice.index is not None
        handed.append(requests.pop(choice.index).url)
        clock.now += 0.001
    assert handed == [f"http://a.example/{i}" for i in range(5)]


def test_the_proxy_whose_slot_comes_first_is_chosen(redis_client: redis.Redis) -> None:
    clock = Clock()
    p = pacer(redis_client, clock, rate=2.0, lease=1)
    p.use_proxies(lambda: [P1, P2, P3])
    reqs = [Request(f"http://a.example/{i}") for i in range(4)]
    proxies = [p.choose(reqs[i : i + 1]).proxy for i in range(3)]
    assert proxies == [P1, P2, P3]  # each pair has its own budget
    assert reqs[1].meta[META_PROXY] == P2 and reqs[1].meta[META_SLOT] == f"a.example@{P2}"
    waiting = p.choose(reqs[3:])
    assert waiting.index is None and waiting.wait == pytest.approx(0.5)
    clock.now += 0.5
    assert p.choose(reqs[3:]).proxy == P1


def test_a_pair_in_cool_down_comes_last_for_that_site_only(redis_client: redis.Redis) -> None:
    clock = Clock()
    p = pacer(redis_client, clock, rate=100.0, lease=1)
    p.use_proxies(lambda: [P1, P2])
    p.budget.record(f"a.example@{P1}", Outcome(ban=True))
    for i in range(5):
        clock.now += 0.02
        assert p.choose([Request(f"http://a.example/{i}")]).proxy == P2
        # the proxy keeps serving other sites
        assert p.choose([Request(f"http://b.example/{i}")]).index == 0
    # another worker learns the cool-down from the hub (its lease of the pair is refused)
    other = pacer(redis_client, clock, rate=100.0, lease=1)
    other.use_proxies(lambda: [P1, P2])
    for i in range(3):
        clock.now += 0.02
        assert other.choose([Request(f"http://a.example/x{i}")]).proxy == P2
    clock.now += 20.0  # the cool-down ends by itself
    chosen = {p.choose([Request(f"http://a.example/y{i}")]).proxy for i in range(2)}
    assert chosen == {P1, P2}


def test_a_spiders_own_proxy_is_kept(redis_client: redis.Redis) -> None:
    p = pacer(redis_client, Clock())
    p.use_proxies(lambda: [P1, P2])
    request = Request("http://a.example/", meta={"proxy": "http://user.example:8080"})
    choice = p.choose([request])
    assert choice.key == "a.example@http://user.example:8080"


def test_while_the_proxy_middleware_has_no_proxy_requests_go_without_a_slot(
    redis_client: redis.Redis,
) -> None:
    """Its first batch from the pool not there yet: a slot for a direct connection would be
    wasted (the request waits for a proxy, then takes a slot of that proxy's key downstream);
    one request a second goes, the others wait for the proxies."""
    clock = Clock()
    p = pacer(redis_client, clock, rate=2.0, lease=1)
    proxies: list[str] = []
    p.use_proxies(lambda: proxies)
    first, second = Request("http://a.example/1"), Request("http://a.example/2")
    first.meta.update({META_SLOT: "a.example", META_PROXY: P1})  # from an earlier choice
    assert p.choose([first, second]) == Choice(0)
    assert META_SLOT not in first.meta and META_PROXY not in first.meta
    # one a second: the first one's wait for a proxy fetches them; the others wait here
    waiting = p.choose([second])
    assert waiting.index is None and 0 < waiting.wait <= 0.02
    clock.now += 1.0
    assert p.choose([second]) == Choice(0)
    assert p.budget.stats["leases"] == 0  # no slot taken on the hub
    second = Request("http://a.example/3")
    proxies.append(P1)
    choice = p.choose([second])
    assert (choice.index, choice.key, choice.proxy) == (0, f"a.example@{P1}", P1)
    assert second.meta[META_SLOT] == f"a.example@{P1}"


def test_crawl_delay_is_split_over_the_proxies(redis_client: redis.Redis) -> None:
    clock = Clock()
    p = pacer(redis_client, clock)
    proxies = [P1, P2]
    p.use_proxies(lambda: proxies)
    p.set_crawl_delay("a.example", 2.0)
    assert p.budget.state(f"a.example@{P1}").cap == pytest.approx(1 / 4)
    assert p.budget.state("a.example").cap == pytest.approx(1 / 2)
    proxies.append(P3)  # a third proxy: each pair's share shrinks
    p.proxies()
    assert p.budget.state(f"a.example@{P3}").cap == pytest.approx(1 / 6)
    assert p.budget.state(f"a.example@{P1}").cap == pytest.approx(1 / 6)
    p.set_crawl_delay("a.example", None)  # a robots.txt without one: no cap anywhere
    assert p.budget.state(f"a.example@{P2}").cap == 0 and p.budget.state("a.example").cap == 0


def test_build_pacer_needs_the_middleware_redis_and_the_switch(redis_url: str) -> None:
    on = {"REDIS_URL": redis_url, "DOWNLOADER_MIDDLEWARES": MIDDLEWARE}
    assert isinstance(build_pacer(get_crawler(settings_dict=on)), Pacer)
    assert build_pacer(get_crawler(settings_dict={**on, "POLITENESS_ENABLED": False})) is None
    assert build_pacer(get_crawler(settings_dict={**on, "REDIS_URL": ""})) is None
    assert build_pacer(get_crawler(settings_dict={"REDIS_URL": redis_url})) is None
    with pytest.raises(PolitenessConfigError, match=r"^POLITENESS_RATE must be > 0"):
        build_pacer(get_crawler(settings_dict={**on, "POLITENESS_RATE": 0}))
    with pytest.raises(PolitenessConfigError, match=r"^POLITENESS_LOOKAHEAD must be"):
        build_pacer(get_crawler(settings_dict={**on, "POLITENESS_LOOKAHEAD": -1}))


@pytest.mark.fuzz
@given(
    sites=st.lists(st.sampled_from("abcd"), min_size=1, max_size=24),
    proxies=st.integers(min_value=0, max_value=3),
    rate=st.sampled_from([2.0, 10.0, 40.0]),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_choices_keep_order_within_a_site_and_every_pair_under_its_rate(
    redis_client: redis.Redis, sites: list[str], proxies: int, rate: float, seed: int
) -> None:
    """Two pacers (workers) drain their buffers: each hands out a site's requests in buffer
    order, every pair stays under ceil(rate * W) + burst, and nothing is left behind."""
    redis_client.flushdb()
    clock = Clock()
    egress = [P1, P2, P3][:proxies]
    rng = random.Random(seed)
    workers = []
    for w in range(2):
        p = pacer(redis_client, clock, rate=rate, lease=rng.choice([1, 4]))
        if egress:  # without proxies there is no ProxyMiddleware to register them
            p.use_proxies(lambda: egress)
        buffer = [Request(f"http://{site}.example/{w}/{i}") for i, site in enumerate(sites)]
        workers.append((p, buffer))
    sent: dict[str, list[float]] = {}
    handed: list[list[str]] = [[], []]
    while any(buffer for _, buffer in workers):
        for w, (p, buffer) in enumerate(workers):
            choice = p.choose(buffer) if buffer else None
            if choice is not None and choice.index is not None:
                request = buffer.pop(choice.index)
                handed[w].append(request.url)
                sent.setdefault(choice.key, []).append(clock.now)
            elif choice is not None:
                assert choice.wait > 0
        clock.now += rng.choice([0.001, 0.01, 0.05])
    for w in range(2):
        for site in set(sites):
            mine = [u for u in handed[w] if u.startswith(f"http://{site}.")]
            assert mine == sorted(mine, key=lambda u: int(u.rsplit("/", 1)[1]))
    assert sum(len(h) for h in handed) == 2 * len(sites)
    for key, times in sent.items():
        times.sort()
        for i in range(len(times)):
            inside = [t for t in times[i:] if t < times[i] + 1.0 - 1e-9]
            assert len(inside) <= math.ceil(rate) + 1, key
