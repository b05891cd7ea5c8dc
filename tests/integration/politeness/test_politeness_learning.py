"""The budget learns each key's limit, on a real redis-server and the real scripts, against a
simulated site on an injected clock (no test sleeps): a site that bans an address sending more
than its limit in a one-second window (as the demo site does), answering 403 with Retry-After.
Nothing about the site is configured: every key starts at the default rate with no ceiling.

What is asserted is what the issue asks of the controller: slow start, then within a minute at
0.9 of the limit or more with few bans; each (site, proxy) key on its own; a lowered limit
followed within 30 s, one just under the held rate not held at half of it; a raised one found; a
site that bans everything slows the key to its floor; a target that slows down before it bans is
backed off; a second crawl starts from what the first learned."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import redis
from scrapy.settings import Settings

from crawlfleet.demosite.app import RateLimiter
from crawlfleet.politeness.budget import Budget, Outcome
from crawlfleet.politeness.config import PolitenessConfig

STEP = 0.002  # the simulation's clock step (s)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Site:
    """The demo site's own limiter (``RateLimiter``: more than ``limit`` requests from one client
    in a fixed one-second window bans it for ``ban`` seconds), answering as the demo site does:
    a banned client's requests get the ban with Retry-After."""

    def __init__(self, limit: int, ban: float = 10.0) -> None:
        self.limiter = RateLimiter(limit, 1.0, ban)

    @property
    def limit(self) -> int:
        return self.limiter.limit

    @limit.setter
    def limit(self, value: int) -> None:
        self.limiter.limit = value

    @property
    def bans(self) -> int:
        return self.limiter.bans_total

    def hit(self, client: str, now: float) -> Outcome:
        left = self.limiter.banned_for(client, now)
        if left:
            return Outcome(ban=True, retry_after=max(round(left), 1))
        if self.limiter.hit(client, now):
            return Outcome(ban=True, retry_after=self.limiter.ban_seconds)
        return Outcome(ban=False, latency=0.01)


def budget(client: redis.Redis, clock: Clock, **settings: object) -> Budget:
    return Budget(client, PolitenessConfig.from_settings(Settings(settings), "learn"), clock=clock)


@dataclass
class Tally:
    sent: int = 0
    banned: int = 0
    times: list[float] = field(default_factory=list)  # send times of clean responses

    def rate(self, start: float, end: float) -> float:
        return sum(1 for t in self.times if start <= t < end) / (end - start)


def crawl(
    b: Budget, clock: Clock, site: Site, keys: dict[str, str], seconds: float
) -> dict[str, Tally]:
    """Every key always has requests waiting; each slot becomes a request to ``site`` as the
    key's client (``keys``: key -> client address). Returns each key's tally."""
    tallies = {key: Tally() for key in keys}
    end = clock.now + seconds
    while clock.now < end:
        for key, address in keys.items():
            while b.acquire(key) == 0:
                outcome = site.hit(address, clock.now)
                tally = tallies[key]
                tally.sent += 1
                if outcome.ban:
                    tally.banned += 1
                else:
                    tally.times.append(clock.now)
                b.record(key, outcome)
        clock.now = round(clock.now + STEP, 6)
    return tallies


def first_time_at(tally: Tally, level: float, start: float, end: float) -> float | None:
    """Seconds from ``start`` to the end of the first 5-second span that ran at ``level`` or
    more; None if none did before ``end``."""
    t = start
    while t + 5 <= end:
        if tally.rate(t, t + 5) >= level:
            return t + 5 - start
        t += 0.5
    return None


def test_a_key_learns_its_limit_with_slow_start_then_holds_under_it(
    redis_client: redis.Redis,
) -> None:
    clock, site = Clock(), Site(limit=20)
    b = budget(redis_client, clock)
    start = clock.now
    tally = crawl(b, clock, site, {"shop.example": "a"}, 180)["shop.example"]
    state = b.state("shop.example")
    reached = first_time_at(tally, 0.9 * 20, start, clock.now)
    print(
        f"\nlearned {state.good:.2f}/s (ceiling {state.ceiling:.2f}) for a limit of 20/s; "
        f"0.9 of it from {reached} s; {tally.banned} of {tally.sent} responses banned, "
        f"{site.bans} bans; phase {state.phase}"
    )
    assert reached is not None and reached <= 60
    assert 0.9 * 20 <= state.good <= 20.5
    # few bans: the search costs a handful, the hold and its rare probes a few more
    assert site.bans <= 6
    assert tally.banned <= 0.01 * tally.sent
    # after the warm-up the key runs at 0.9 of the limit or more, probes included
    after = tally.rate(start + reached, clock.now)
    print(f"after the warm-up: {after / 20:.2f} of the limit")
    assert after >= 0.9 * 20


def test_each_proxy_key_learns_its_own_limit(redis_client: redis.Redis) -> None:
    """The site allows one proxy's address 10/s and the other's 40/s."""
    clock = Clock()
    b = budget(redis_client, clock)

    class TwoLimits(Site):
        def hit(self, client: str, now: float) -> Outcome:
            self.limit = 10 if client == "10.0.0.1" else 40
            return super().hit(client, now)

    site = TwoLimits(limit=10)
    keys = {"shop.example@p1:3128": "10.0.0.1", "shop.example@p2:3128": "10.0.0.2"}
    crawl(b, clock, site, keys, 120)
    slow, fast = (b.state(key) for key in keys)
    print(f"\nlearned {slow.good:.2f}/s and {fast.good:.2f}/s for limits of 10 and 40")
    assert 9 <= slow.good <= 10.3
    assert 36 <= fast.good <= 41


def test_a_lowered_limit_is_followed_within_30_s_and_a_raised_one_found(
    redis_client: redis.Redis,
) -> None:
    clock, site = Clock(), Site(limit=20)
    b = budget(redis_client, clock)
    key = {"shop.example": "a"}
    crawl(b, clock, site, key, 90)
    assert b.state("shop.example").good >= 18
    site.limit = 10
    changed = clock.now
    tally = crawl(b, clock, site, key, 90)["shop.example"]
    after = first_time_at(tally, 0.9 * 10, changed, clock.now)
    bans_after = site.bans
    print(f"\n20 -> 10/s: back at 0.9 of the new limit after {after} s")
    assert after is not None and after <= 30
    assert 9 <= b.state("shop.example").good <= 10.3
    # raised: the probes above the ceiling find it (gently: no ban storm)
    site.limit = 30
    changed = clock.now
    tally = crawl(b, clock, site, key, 600)["shop.example"]
    found = first_time_at(tally, 0.9 * 30, changed, clock.now)
    print(f"10 -> 30/s: at 0.9 of the new limit after {found} s, {site.bans - bans_after} bans")
    assert found is not None
    assert b.state("shop.example").good >= 27


def test_a_limit_lowered_just_under_the_held_rate_is_not_held_at_half_of_it(
    redis_client: redis.Redis,
) -> None:
    """20 -> 15/s: the key holding 20 is banned there (it holds 18, under that new ceiling),
    then banned at 18 with no clean rate known: the backoff halves it to 9. It grows back from
    there; it once held 9 (0.6 of the limit) for two minutes, until its next probe."""
    clock, site = Clock(), Site(limit=20)
    b = budget(redis_client, clock)
    key = {"shop.example": "a"}
    crawl(b, clock, site, key, 90)
    site.limit = 15
    changed, bans = clock.now, site.bans
    tally = crawl(b, clock, site, key, 90)["shop.example"]
    after = first_time_at(tally, 0.9 * 15, changed, clock.now)
    state = b.state("shop.example")
    print(f"\n20 -> 15/s: back at 0.9 of it after {after} s, {site.bans - bans} bans; {state}")
    assert after is not None and after <= 60
    assert 0.9 * 15 <= state.good <= 15.3
    assert site.bans - bans <= 3


def test_a_site_that_bans_everything_slows_the_key_to_its_floor(
    redis_client: redis.Redis,
) -> None:
    class Wall(Site):
        def hit(self, client: str, now: float) -> Outcome:
            return Outcome(ban=True, retry_after=5)

    clock, site = Clock(), Wall(limit=1)
    b = budget(redis_client, clock, POLITENESS_RATE=4, POLITENESS_MIN_RATE=0.5)
    tally = crawl(b, clock, site, {"wall.example": "a"}, 120)["wall.example"]
    state = b.state("wall.example")
    assert state.rate == pytest.approx(0.5)
    assert state.good == 0
    # every answer a ban, at most one request per Retry-After and what the backoff let through
    assert tally.sent <= 120 / 5 * 2 + 8, tally.sent


def test_a_target_that_slows_down_is_backed_off_before_it_bans(
    redis_client: redis.Redis,
) -> None:
    """No ban at all: above 12/s the site answers in a second instead of 20 ms."""
    clock = Clock()
    b = budget(redis_client, clock)

    class Slowing(Site):
        """Never bans: past the 12th request of a one-second window the answers are slow."""

        seen: dict[str, tuple[float, int]] = {}

        def hit(self, client: str, now: float) -> Outcome:
            start, count = self.seen.get(client, (now, 0))
            start, count = (now, 1) if now - start >= 1 else (start, count + 1)
            self.seen[client] = (start, count)
            return Outcome(ban=False, latency=1.0 if count > 12 else 0.02)

    site = Slowing(limit=12)
    tally = crawl(b, clock, site, {"slow.example": "a"}, 120)["slow.example"]
    state = b.state("slow.example")
    assert tally.banned == 0
    assert state.ceiling > 0  # the slow-down was a ceiling
    assert state.rate < 24, state


def test_a_second_crawl_starts_from_what_the_first_learned(redis_client: redis.Redis) -> None:
    clock, site = Clock(), Site(limit=20)
    first = budget(redis_client, clock)
    crawl(first, clock, site, {"shop.example": "a"}, 90)
    first.release_all()
    clock.now += 3600  # an hour later, a new worker
    second = budget(redis_client, clock)
    start = clock.now
    bans = site.bans
    tally = crawl(second, clock, site, {"shop.example": "a"}, 20)["shop.example"]
    reached = first_time_at(tally, 0.9 * 20, start, clock.now)
    print(f"\nsecond crawl: 0.9 of the limit after {reached} s")
    assert reached is not None and reached <= 10
    assert site.bans - bans <= 1
    # the state is kept a week after its last use, not a day
    ttl = redis_client.pttl(second.keys.politeness("shop.example"))
    assert 6 * 86_400_000 < ttl <= 7 * 86_400_000


def test_a_cap_is_kept_and_a_start_rate_is_only_a_start(redis_client: redis.Redis) -> None:
    clock, site = Clock(), Site(limit=20)
    capped = budget(redis_client, clock, POLITENESS_MAX_RATE=5)
    crawl(capped, clock, site, {"capped.example": "a"}, 40)
    assert capped.state("capped.example").rate == 5
    assert site.bans == 0
    started = budget(redis_client, clock, POLITENESS_RATE=15)
    crawl(started, clock, site, {"started.example": "b"}, 90)
    assert started.state("started.example").good >= 18


def test_memory_is_bounded_by_the_number_of_keys(redis_client: redis.Redis) -> None:
    clock = Clock()
    b = budget(redis_client, clock, POLITENESS_MAX_KEYS=20)
    for i in range(60):
        b.acquire(f"site{i}.example")
        clock.now += 2.1  # each lease ends a window: the index is trimmed
    index = redis_client.zrange(b.keys.politeness_index, 0, -1)
    assert len(index) <= 21
    hashes = list(redis_client.scan_iter(match=b.keys.politeness("*"), count=1000))
    assert len(hashes) <= 21
    assert b.keys.politeness("site59.example").encode() in index
