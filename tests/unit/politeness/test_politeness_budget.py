"""crawlfleet.politeness.budget on a real redis-server with an injected clock: the window bound
holds for any mix of workers, lease sizes and late workers; leases give back their tail; keys."""

from __future__ import annotations

import math
import random

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from crawlfleet.politeness.budget import Budget, site_key
from crawlfleet.politeness.config import Limits, PolitenessConfig


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def config(rate: float, burst: int = 1, lease: int = 8, horizon: float = 1.0) -> PolitenessConfig:
    return PolitenessConfig(
        limits=Limits(rate, rate, rate, burst),
        lease_size=lease,
        lease_horizon=horizon,
        namespace="u",
    )


def most_in(times: list[float], width: float) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + width - 1e-9:
            j += 1
        best = max(best, j - i)
    return best


@pytest.mark.fuzz
@given(
    rate=st.sampled_from([0.5, 3.0, 10.0, 33.0]),
    burst=st.integers(min_value=1, max_value=5),
    leases=st.lists(st.sampled_from([1, 2, 8, 32]), min_size=1, max_size=5),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_no_window_exceeds_the_rate_plus_burst(
    redis_client: redis.Redis, rate: float, burst: int, leases: list[int], seed: int
) -> None:
    redis_client.flushdb()
    clock = Clock()
    workers = [Budget(redis_client, config(rate, burst, lease), clock=clock) for lease in leases]
    rng = random.Random(seed)
    used: list[float] = []
    end = clock.now + max(40 / rate, 3)
    while clock.now < end:
        # workers come in random order, some of them late (busy) for a while
        for b in rng.sample(workers, len(workers)):
            if rng.random() < 0.8 and b.acquire("k") == 0:
                used.append(clock.now)
        clock.now += rng.choice([0.001, 0.003, 0.02, 0.15])
    for width in (1.0, 2.5):
        assert most_in(used, width) <= math.ceil(rate * width) + burst, width
    assert len(used) >= 1


def test_one_worker_uses_every_slot_at_the_rate(redis_client: redis.Redis) -> None:
    clock = Clock()
    b = Budget(redis_client, config(20, burst=3), clock=clock)
    used = []
    for _ in range(5000):  # 5 s in 1 ms steps, as many slots as are due at each
        while b.acquire("k") == 0:
            used.append(clock.now)
        clock.now += 0.001
    assert len(used) in (102, 103)  # 3 at once, then one per 50 ms
    assert used[:3] == [100.0, 100.0, 100.0]
    assert b.stats["dropped"] == 0 and b.stats["leases"] == math.ceil(len(used) / 8)


def test_a_late_worker_drops_slots_instead_of_saving_them(redis_client: redis.Redis) -> None:
    clock = Clock()
    b = Budget(redis_client, config(10), clock=clock)
    assert b.acquire("k", want=8) == 0
    clock.now += 0.55  # busy: slots at +0.1 .. +0.4 have gone by
    assert b.acquire("k") == 0  # the slot at +0.5
    assert b.stats["dropped"] == 4
    assert b.acquire("k") == pytest.approx(0.05)
    assert b.next_allowed("k") == pytest.approx(clock.now + 0.05)


def test_release_gives_the_tail_back_only_when_it_is_the_tail(redis_client: redis.Redis) -> None:
    clock = Clock()
    first, second = (Budget(redis_client, config(10), clock=clock) for _ in range(2))
    assert first.acquire("k", want=8) == 0
    assert first.release("k") == 7  # nobody leased after it: the slots are free again
    assert second.acquire("k", want=2) == pytest.approx(0.1)  # the slot after the used one
    assert first.acquire("k", want=4) == pytest.approx(0.3)  # after second's lease
    assert second.release("k") == 0  # first leased after it: its slots stay lost
    assert first.release("k") == 4


def test_the_lease_horizon_bounds_what_a_worker_holds(redis_client: redis.Redis) -> None:
    clock = Clock()
    hog, late = (Budget(redis_client, config(10, lease=32), clock=clock) for _ in range(2))
    assert hog.lease("k", 32) == 11  # now .. now + 1 s
    assert late.lease("k", 32) == 0
    assert late.acquire("k") == pytest.approx(1.1)  # the hog's slots, then its own
    clock.now += 0.2
    assert late.acquire("k") == pytest.approx(0.9)  # it may ask now: 2 slots within 1 s
    assert late.stats["granted"] == 2 and late.stats["leases"] == 2


def test_keys_by_host_domain_ip_and_proxy() -> None:
    assert site_key("https://Www.Example.co.uk:8443/a?b", "host") == "www.example.co.uk"
    assert site_key("https://www.example.co.uk/a", "domain") == "example.co.uk"
    assert site_key("http://127.0.0.1:8000/api", "ip") == "127.0.0.1"
    assert site_key("http://localhost/", "ip") in ("127.0.0.1", "::1")
    assert site_key("books.example", "host") == "books.example"
    b = Budget(redis.Redis(), config(1))
    assert b.key_for("https://a.example/x", "10.0.0.1:3128") == "a.example@10.0.0.1:3128"
    assert b.key_for("https://a.example/x") == "a.example"
    assert Budget.site_of("a.example@10.0.0.1:3128") == "a.example"
    assert b.keys.politeness("a.example") == "u:politeness:key:a.example"
