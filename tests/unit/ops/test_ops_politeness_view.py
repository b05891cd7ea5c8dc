"""The read model's politeness section on a real redis-server, its state written by the real
Budget (injected clock, so no test sleeps): per-key rows, the ban record, which limit binds the
crawl (site, workers, hub, none), and garbage state hashes skipped with a warning."""

from __future__ import annotations

import threading

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from support.waiting import wait_until

from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.politeness.budget import Budget, Outcome
from crawlfleet.politeness.config import Limits, PolitenessConfig
from crawlfleet.views.hub import HubProbe, hub_health
from crawlfleet.views.politeness import (
    HUB_SLOW_MS,
    MAX_WARNINGS,
    POLITENESS_KEYS,
    bound_by,
    politeness_snapshot,
)

NS = "book"
CALM = {"rtt_ms": 0.3, "cpu": None}
# Busy-waits in Redis for ARGV[1] ms: every other client's round trip waits behind it.
BUSY = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= ARGV[1] * 1000
return 1
"""


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def budget(client: redis.Redis, clock: Clock, rate: float = 20.0) -> Budget:
    # a fixed rate (the read model is tested here, not the learning)
    config = PolitenessConfig(limits=Limits(rate, rate / 10, rate, 1), namespace=NS)
    return Budget(client, config, clock=clock)


def drive(b: Budget, clock: Clock, keys: dict[str, float], seconds: float) -> None:
    """Ask for a slot of each key every ``keys[key]`` seconds (0: as often as it may be hit),
    recording a clean response for every slot used, for ``seconds`` in 1 ms steps."""
    due = dict.fromkeys(keys, clock.now)
    end = clock.now + seconds
    while clock.now < end:
        for key, every in keys.items():
            if clock.now >= due[key] and b.acquire(key) == 0:
                b.record(key, Outcome(ban=False))
                due[key] = clock.now + every
        clock.now += 0.001


def view(client: redis.Redis, clock: Clock, **context: object) -> dict:
    args: dict = {"waiting": 10, "workers_alive": 2, "hub": CALM, **context}
    return politeness_snapshot(client, NS, clock.now * 1000, **args)


def by_key(section: dict) -> dict[str, dict]:
    return {row["key"]: row for row in section["keys"]}


def test_keys_at_their_rate_and_a_banned_proxy_bind_the_site(redis_client: redis.Redis) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    keys = {"books.test@10.0.0.1:3128": 0.0, "books.test@10.0.0.2:3128": 0.0}
    drive(b, clock, keys, 5.0)
    b.record("books.test@10.0.0.2:3128", Outcome(ban=True))
    drive(b, clock, {"books.test@10.0.0.1:3128": 0.0}, 0.5)
    section = view(redis_client, clock)
    rows = by_key(section)
    full, banned = rows["books.test@10.0.0.1:3128"], rows["books.test@10.0.0.2:3128"]
    assert full["state"] == "full" and full["site"] == "books.test"
    assert full["proxy"] == "10.0.0.1:3128"
    assert full["budget"] == full["rate"] == 20.0 and full["cap"] is None
    assert full["observed"] == pytest.approx(20.0, rel=0.2)
    assert full["bans"] == full["bans_recent"] == 0 and full["cooldown"] == 0
    assert banned["state"] == "cooling"
    # banned at the rate it had carried clean: held just under it (POLITENESS_PRECISION 0.1)
    assert banned["budget"] == 18.0 and banned["ceiling"] == 20.0
    assert banned["cooldown"] == pytest.approx(19.5, abs=0.01)  # POLITENESS_COOLDOWN 20 s
    assert banned["bans"] == banned["bans_recent"] == 1
    assert banned["last_ban_age"] == pytest.approx(0.5, abs=0.01)
    assert section["bound"] == "site" and "add proxies" in section["reason"]
    assert section["keys_total"] == section["keys_active"] == 2
    assert section["bans_recent"] == 1 and section["warnings"] == []


def test_keys_below_their_budget_while_requests_wait_bind_the_workers(
    redis_client: redis.Redis,
) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    # one request every 0.2 s to keys that allow 20/s: the workers cannot keep up
    drive(b, clock, {"a.test": 0.2, "b.test": 0.2, "c.test": 0.0}, 12.0)
    section = view(redis_client, clock)
    states = {k: r["state"] for k, r in by_key(section).items()}
    assert states == {"a.test": "slack", "b.test": "slack", "c.test": "full"}
    assert by_key(section)["a.test"]["observed"] == pytest.approx(5.0, rel=0.3)
    assert section["bound"] == "workers"
    assert section["reason"].startswith("2 of 3 active keys below their budget")
    assert view(redis_client, clock, waiting=0)["bound"] == "none"
    assert view(redis_client, clock, paused=True)["bound"] == "none"
    no_worker = view(redis_client, clock, workers_alive=0)
    assert no_worker["bound"] == "workers" and "no worker is alive" in no_worker["reason"]
    # a minute later nothing was leased: every key is idle and none holds the crawl back
    clock.now += 61
    later = view(redis_client, clock)
    assert {r["state"] for r in later["keys"]} == {"idle"}
    assert later["keys_active"] == 0 and later["bound"] == "workers"


def test_half_of_the_active_keys_held_is_the_site(redis_client: redis.Redis) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    drive(b, clock, {"a.test": 0.0, "b.test": 0.5}, 3.0)
    assert view(redis_client, clock)["bound"] == "site"  # 1 full of 2
    drive(b, clock, {"a.test": 0.0, "b.test": 0.5, "c.test": 0.5}, 3.0)
    assert view(redis_client, clock)["bound"] == "workers"  # 1 full of 3


def test_crawl_delay_caps_the_budget(redis_client: redis.Redis) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    b.set_crawl_delay("slow.test", 2.0)
    drive(b, clock, {"slow.test": 0.0}, 4.0)
    row = by_key(view(redis_client, clock))["slow.test"]
    assert row["cap"] == 0.5 and row["rate"] == 20.0 and row["budget"] == 0.5
    assert row["state"] == "full"


def test_bans_are_counted_over_five_minutes_from_a_bounded_record(
    redis_client: redis.Redis,
) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    bans = SpiderKeys(NS).politeness_bans
    for _ in range(1100):
        b.record("x.test@p:1", Outcome(ban=True))
        clock.now += 0.01
    assert redis_client.zcard(bans) == 1000  # capped
    clock.now += 240
    b.record("y.test@p:1", Outcome(ban=True))
    clock.now += 120  # x's bans are six minutes old, y's two
    section = view(redis_client, clock)
    assert by_key(section)["x.test@p:1"]["bans_recent"] == 0
    assert by_key(section)["x.test@p:1"]["bans"] == 1100
    assert by_key(section)["y.test@p:1"]["bans_recent"] == 1
    assert section["bans_recent"] == 1
    clock.now += 300
    b.record("y.test@p:1", Outcome(ban=True))  # and x's entries, over ten minutes old, go
    assert redis_client.zcard(bans) == 2
    assert redis_client.pttl(bans) > 86_000_000


def test_only_the_most_recently_used_keys_are_read(redis_client: redis.Redis) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    for i in range(POLITENESS_KEYS + 10):
        b.acquire(f"h{i}.test")
        clock.now += 0.01
    section = view(redis_client, clock)
    assert section["keys_total"] == POLITENESS_KEYS + 10
    assert len(section["keys"]) == POLITENESS_KEYS
    assert section["keys"][0]["key"] == f"h{POLITENESS_KEYS + 9}.test"


def test_garbage_state_is_skipped_with_one_line_each(redis_client: redis.Redis) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    k = SpiderKeys(NS)
    drive(b, clock, {"good.test": 0.0}, 1.0)
    b.acquire("bad.test")
    redis_client.hset(k.politeness("bad.test"), "rate", "fast")
    b.acquire("nan.test")
    redis_client.hset(k.politeness("nan.test"), "tat", "nan")
    redis_client.zadd(k.politeness_index, {"elsewhere:key": clock.now * 1000})
    section = view(redis_client, clock)
    assert [r["key"] for r in section["keys"]] == ["good.test"]
    assert section["warnings"] == [
        "politeness index member 'elsewhere:key' is not a state hash",
        "politeness key 'nan.test': field 'tat' = 'nan' is not a number; key skipped",
        "politeness key 'bad.test': field 'rate' = 'fast' is not a number; key skipped",
    ]
    assert all("\n" not in w for w in section["warnings"])
    for i in range(10):
        redis_client.hset(k.politeness(f"z{i}"), "oks", "many")
        redis_client.zadd(k.politeness_index, {k.politeness(f"z{i}"): 1})
    warnings = view(redis_client, clock)["warnings"]
    assert len(warnings) == MAX_WARNINGS + 1
    assert warnings[-1] == "8 more politeness keys skipped"
    redis_client.delete(k.politeness("z0"))
    redis_client.set(k.politeness("z0"), "a string")
    redis_client.zadd(k.politeness_index, {k.politeness("z0"): clock.now * 1000 + 1})
    assert "'z0': WRONGTYPE" in "".join(view(redis_client, clock)["warnings"])
    # an index member whose hash expired is no key any more, and no warning
    redis_client.delete(k.politeness("good.test"))
    assert "good.test" not in by_key(view(redis_client, clock))


@pytest.mark.fuzz
@given(
    fields=st.dictionaries(
        st.sampled_from(["tat", "rate", "cap", "cool", "window", "oks", "bans", "banned", "x"]),
        st.one_of(
            st.text(max_size=12),
            st.floats(allow_nan=True).map(repr),
            st.integers(min_value=-(10**20), max_value=10**20).map(str),
        ),
        min_size=1,
    )
)
def test_any_state_hash_gives_a_row_or_a_warning(
    redis_client: redis.Redis, fields: dict[str, str]
) -> None:
    redis_client.flushdb()
    k = SpiderKeys(NS)
    redis_client.hset(k.politeness("f.test"), mapping=fields)
    redis_client.zadd(k.politeness_index, {k.politeness("f.test"): 1_000_000_000})
    section = politeness_snapshot(redis_client, NS, 1_000_000_500, waiting=1, workers_alive=1)
    assert len(section["keys"]) + len(section["warnings"]) == 1
    assert section["bound"] in ("workers", "site")


def test_a_slow_hub_binds_before_anything_else(redis_client: redis.Redis) -> None:
    redis_client.flushdb()
    clock = Clock()
    drive(budget(redis_client, clock), clock, {"a.test": 0.0}, 2.0)
    assert view(redis_client, clock)["bound"] == "site"
    busy = redis_client.register_script(BUSY)
    measured: list[dict] = []

    def slow_hub() -> bool:
        worker = threading.Thread(target=busy, kwargs={"args": [300]})
        worker.start()
        measured.append(hub_health(redis_client))
        worker.join()
        return measured[-1]["rtt_ms"] >= HUB_SLOW_MS

    wait_until(slow_hub, timeout=10, what="a PING that waits behind a busy script")
    section = view(redis_client, clock, hub=measured[-1])
    assert section["bound"] == "hub" and section["reason"].startswith("Redis answers a PING in")
    busy_cpu = {"rtt_ms": 1.0, "cpu": 0.95}
    assert bound_by([], waiting=1, workers_alive=1, paused=False, hub=busy_cpu) == (
        "hub",
        "Redis uses 95% of a core: relieve the hub",
    )
    idle = bound_by([], waiting=0, workers_alive=1, paused=False, hub=measured[-1])
    assert idle[0] == "none"


def test_the_hub_probe_measures_redis_cpu_between_looks(redis_client: redis.Redis) -> None:
    probe = HubProbe()
    assert hub_health(redis_client, probe)["cpu"] is None  # nothing to compare with yet
    assert hub_health(redis_client)["cpu"] is None and hub_health(redis_client)["rtt_ms"] > 0
    redis_client.register_script(BUSY)(args=[1100])
    cpu = hub_health(redis_client, probe)["cpu"]
    # about one core while the script ran (less when this shared machine preempts Redis)
    assert cpu is not None and 0.05 <= cpu <= 1.5


def test_a_young_window_falls_back_to_the_next_free_slot(redis_client: redis.Redis) -> None:
    redis_client.flushdb()
    clock = Clock()
    b = budget(redis_client, clock)
    b.acquire("calm.test", want=1)  # one slot, then nothing for 0.9 s
    clock.now += 0.7
    drive(b, clock, {"busy.test": 0.0}, 0.2)
    rows = by_key(view(redis_client, clock))
    assert rows["busy.test"]["observed"] is None and rows["busy.test"]["state"] == "full"
    assert rows["calm.test"]["observed"] is None and rows["calm.test"]["state"] == "slack"
    assert rows["calm.test"]["next_slot"] == pytest.approx(-0.85, abs=0.01)
