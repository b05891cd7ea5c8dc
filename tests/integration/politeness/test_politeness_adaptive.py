"""Adaptive limits against a real redis-server, on an injected clock (no test sleeps): a ban backs
the key's rate off multiplicatively (once per burst of bans, never below the floor) and clean,
loaded windows grow it back (never above the cap); Retry-After holds the whole key; a ban through
a proxy cools that (proxy, site) pair down, by itself and for that site only.
(test_politeness_learning.py: how a key learns a site's limit.)"""

from __future__ import annotations

import pytest
import redis
from scrapy.settings import Settings

from crawlfleet.politeness.budget import Budget, Outcome
from crawlfleet.politeness.config import PolitenessConfig

BAN, OK = Outcome(ban=True), Outcome(ban=False)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def budget(client: redis.Redis, clock: Clock, **settings: object) -> Budget:
    values = {
        "POLITENESS_RATE": 8,
        "POLITENESS_MIN_RATE": 1,
        "POLITENESS_MAX_RATE": 10,
        "POLITENESS_WINDOW": 5,
        "POLITENESS_COOLDOWN": 20,
        **settings,
    }
    return Budget(client, PolitenessConfig.from_settings(Settings(values), "book"), clock=clock)


def run(b: Budget, clock: Clock, key: str, seconds: float, outcome: Outcome = OK) -> int:
    """Use every slot of ``key`` for ``seconds`` (1 ms steps), recording ``outcome``; uses."""
    used = 0
    end = clock.now + seconds
    while clock.now < end:
        if b.acquire(key) == 0:
            used += 1
            b.record(key, outcome)
        else:
            clock.now = round(clock.now + 0.001, 6)
    return used


def test_ban_backs_off_then_clean_windows_grow_back(redis_client: redis.Redis) -> None:
    clock = Clock()
    b = budget(redis_client, clock)
    assert run(b, clock, "site.example", 2) in (16, 17)
    assert b.state("site.example").rate == 8
    # a burst of bans (several workers' responses) is one backoff: 8 -> 4
    for _ in range(5):
        b.record("site.example", BAN)
    assert b.state("site.example").rate == 4 and b.state("site.example").bans == 5
    # later bans back off again, never below the floor
    for _ in range(4):
        clock.now += 2.5
        b.record("site.example", BAN)
    assert b.state("site.example").rate == 1
    assert b.state("site.example").ceiling == 1 and b.state("site.example").phase == "backing off"
    # clean, loaded windows of 5 s: the first at the old ceiling forgets it; then the key grows
    # a quarter as fast as a slow start (x1.25 a window: it met bans), up to the cap
    rates = []
    for _ in range(14):
        run(b, clock, "site.example", 5)
        rates.append(b.state("site.example").rate)
    grown = rates[rates.index(1.25) :]
    assert grown[:3] == pytest.approx([1.25, 1.5625, 1.953125]), rates
    assert rates == sorted(rates) and rates[-1] == 10
    assert b.state("site.example").ceiling == 0 and b.state("site.example").phase == "growing"
    # the slots follow the rate: at the cap, 10/s
    assert run(b, clock, "site.example", 3) in (30, 31)


def test_an_idle_key_does_not_probe_up(redis_client: redis.Redis) -> None:
    clock = Clock()
    b = budget(redis_client, clock)
    for _ in range(4):  # one request per window: far below half the budget
        assert b.acquire("quiet.example") == 0
        b.record("quiet.example", OK)
        clock.now += 6
    b.lease("quiet.example", 1)
    assert b.state("quiet.example").rate == 8


def test_retry_after_holds_the_whole_key(redis_client: redis.Redis) -> None:
    clock = Clock()
    worker, other = budget(redis_client, clock), budget(redis_client, clock)
    run(worker, clock, "site.example", 1)
    worker.record("site.example", Outcome(ban=True, retry_after=30))
    assert worker.acquire("site.example") > 29
    assert other.acquire("site.example") > 28.9  # its lease starts after Retry-After
    clock.now += 30.5
    assert run(other, clock, "site.example", 1) >= 3


def test_crawl_delay_caps_the_rate(redis_client: redis.Redis) -> None:
    clock = Clock()
    b = budget(redis_client, clock)
    b.set_crawl_delay("site.example", 2.0)
    assert run(b, clock, "site.example", 10) in (5, 6)
    assert b.state("site.example").cap == 0.5
    b.set_crawl_delay("site.example", None)
    b.release("site.example")
    clock.now += 2
    assert run(b, clock, "site.example", 2) in (16, 17)


def test_cooldown_of_a_proxy_site_pair_expires_by_itself(redis_client: redis.Redis) -> None:
    clock = Clock()
    b = budget(redis_client, clock)
    banned, same_proxy_elsewhere = (
        b.key_for("https://a.example/x", "10.0.0.1:3128"),
        b.key_for("https://b.example/y", "10.0.0.1:3128"),
    )
    other_proxy = b.key_for("https://a.example/x", "10.0.0.2:3128")
    assert banned == "a.example@10.0.0.1:3128"
    b.record(banned, BAN)
    assert b.cooldown("a.example", "10.0.0.1:3128") == 20
    # the proxy keeps serving other sites, and the site other proxies
    assert b.acquire(same_proxy_elsewhere) == 0
    assert b.acquire(other_proxy) == 0
    assert b.cooldown("b.example", "10.0.0.1:3128") == 0
    # the pair gets nothing until the cool-down ends, another worker neither
    late = budget(redis_client, clock)
    assert 19.9 < late.acquire(banned) <= 20
    assert 19.9 < b.next_allowed(banned) - clock.now <= 20
    clock.now += 19.9
    assert late.acquire(banned) > 0
    clock.now += 0.2
    assert b.cooldown("a.example", "10.0.0.1:3128") == 0
    assert late.acquire(banned) == 0
    # the state expires on the hub by itself too (POLITENESS_MEMORY, a week after its last use)
    assert 0 < redis_client.pttl(b.keys.politeness(banned)) <= 7 * 86_400_000
