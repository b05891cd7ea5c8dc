"""The Lua contract of ``KeyedPriorityQueue`` on a real redis-server: one priority queue per
politeness key (priority order, FIFO among equals within a site), pops spread over the sites
served least recently (skipping the ones a worker names), requeued entries back in their own
site's queue and served first, an O(1) length, no key left behind; hostile sites and payloads
(Hypothesis) lose and mix up nothing; another class's data at the key is a one-line error."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from crawlfleet.frontier import scripts
from crawlfleet.frontier.queues import KeyedPriorityQueue, PriorityQueue

QK, SEQ, SK = "t:requests", "t:seq", "t:start_urls"
PUSH = (
    "for i = 5, #ARGV, 3 do q_push(ARGV[i], ARGV[i + 1], ARGV[i + 2]) end q_flush() return q_len()"
)
POP = """local skip, n = {}, tonumber(ARGV[5])
for i = 6, #ARGV do skip[ARGV[i]] = true end
return q_pop(n, skip, #ARGV - 5)"""
REQUEUE = "for i = 5, #ARGV do q_requeue(ARGV[i]) end return q_len()"


class Keyed:
    """The queue's Lua functions called one at a time, as the frontier's scripts call them."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.queue = KeyedPriorityQueue(client, QK)
        self._scripts = {
            body: client.register_script(scripts.build(KeyedPriorityQueue.LUA, "", body))
            for body in (PUSH, POP, REQUEUE)
        }

    def _run(self, body: str, *args: Any) -> Any:
        return self._scripts[body](keys=[QK, SEQ, SK], args=["t", "w", "60000", "0", *args])

    def push(self, *entries: tuple[bytes | str, int, bytes | str]) -> int:
        """Push (payload, priority, site) entries; returns q_len()."""
        return int(self._run(PUSH, *(x for p, prio, site in entries for x in (p, prio, site))))

    def pop(self, n: int, *skip: bytes | str) -> list[tuple[bytes, bytes]]:
        """(lease value, payload) of up to ``n`` entries."""
        got = self._run(POP, n, *skip)
        return [(bytes(got[i]), bytes(got[i + 1])) for i in range(0, len(got), 2)]

    def requeue(self, *values: bytes) -> int:
        return int(self._run(REQUEUE, *values))


@pytest.fixture
def keyed(redis_client: redis.Redis) -> Keyed:
    return Keyed(redis_client)


def payloads(popped: list[tuple[bytes, bytes]]) -> list[str]:
    return [payload.decode() for _, payload in popped]


def test_priority_then_fifo_within_a_site(keyed: Keyed) -> None:
    keyed.push(("a1", 0, "a"), ("a2", 5, "a"), ("a3", 0, "a"), ("a4", -3, "a"), ("a5", 5, "a"))
    assert keyed.push(("dup", 0, "a"), ("dup", 0, "a")) == 7  # identical entries stay apart
    assert payloads(keyed.pop(7)) == ["a2", "a5", "a1", "a3", "dup", "dup", "a4"]
    assert len(keyed.queue) == 0


def _calls(client: redis.Redis) -> Counter[str]:
    """Commands run so far, by name (scripts' own commands included)."""
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


def test_a_multi_site_batch_is_one_write_per_site(keyed: Keyed) -> None:
    keyed.push(("old", 0, "b"))  # b is ready already: its turn is kept
    before = _calls(keyed.client)
    batch = [("a0", 0, "a"), ("b0", 0, "b"), ("a1", 3, "a"), ("c0", 0, "c"), ("a2", 0, "a")]
    assert keyed.push(*batch) == 6
    ran = _calls(keyed.client) - before
    # one INCRBY, a ZADD per site (3), one HINCRBY, one ZADD NX of the sites, the HGET of q_len
    assert (ran["incrby"], ran["incr"], ran["zadd"], ran["hincrby"]) == (1, 0, 4, 1)
    ready = keyed.client.zrange(keyed.queue.ready, 0, -1, withscores=True)
    assert [site for site, _ in ready] == [b"b", b"a", b"c"]  # scored by its first entry
    got = payloads(keyed.pop(6))
    assert [p for p in got if p[0] == "a"] == ["a1", "a0", "a2"]  # priority, then push order
    assert [p for p in got if p[0] != "a"] == ["old", "b0", "c0"]
    # numbered in push order: FIFO among equal priorities across batches too
    keyed.push(("x0", 0, "x"), ("x1", 0, "x"))
    keyed.push(("x2", 0, "x"))
    assert payloads(keyed.pop(3)) == ["x0", "x1", "x2"]


def test_a_batch_larger_than_one_zadd(keyed: Keyed) -> None:
    entries = [(f"e{i}", 0, f"s{i % 2}") for i in range(2500)]
    assert keyed.push(*entries) == 2500
    assert keyed.queue.sites() == 2
    got = payloads(keyed.pop(2500))
    assert sorted(got) == sorted(e for e, _, _ in entries)
    assert [p for p in got if int(p[1:]) % 2 == 0] == [f"e{i}" for i in range(0, 2500, 2)]


def test_every_script_that_pushes_flushes() -> None:
    for name in ("enqueue.lua", "feed.lua", "requeue_failed.lua"):
        body = scripts.lua(name)
        assert "q_push(" in body and "q_flush()" in body.split("q_push(")[-1], name


def test_a_pop_spreads_over_the_sites(keyed: Keyed) -> None:
    for i in range(5):
        keyed.push((f"a{i}", 0, "a"), (f"b{i}", 0, "b"), (f"c{i}", 0, "c"))
    got = payloads(keyed.pop(6))
    assert Counter(p[0] for p in got) == {"a": 2, "b": 2, "c": 2}
    # one site with few entries: the others fill the pop
    keyed.push(("d0", 0, "d"))
    got = payloads(keyed.pop(6))
    assert "d0" in got and len(got) == 6
    assert len(keyed.queue) == 15 + 1 - 12


def test_sites_are_served_least_recently_served_first(keyed: Keyed) -> None:
    for site in "abc":
        keyed.push(*((f"{site}{i}", 0, site) for i in range(9)))
    order = [payloads(keyed.pop(1))[0][0] for _ in range(6)]
    assert order == list("abcabc")
    # a site that comes later takes its turn after the sites waiting now, not after their backlog
    keyed.push(("n0", 0, "new"))
    assert [payloads(keyed.pop(1))[0] for _ in range(5)] == ["a2", "b2", "c2", "n0", "a3"]


def test_a_pop_skips_the_sites_the_worker_names(keyed: Keyed) -> None:
    keyed.push(*((f"s{i}", 0, "slow") for i in range(10)), ("f0", 0, "fast"), ("f1", 0, "fast"))
    assert payloads(keyed.pop(4, "slow")) == ["f0", "f1"]
    assert keyed.pop(4, "slow", "other") == []  # nothing else queued: nothing popped
    assert len(keyed.queue) == 10
    assert payloads(keyed.pop(2)) == ["s0", "s1"]


def test_requeue_puts_entries_back_into_their_site_first(keyed: Keyed) -> None:
    keyed.push(("a0", 1, "a"), ("a1", 0, "a"), ("b0", 0, "b"), ("b1", 0, "b"))
    first = keyed.pop(2)
    assert payloads(first) == ["a0", "b0"]
    assert payloads(keyed.pop(1)) == ["a1"]  # a and b were served in the same turn: a first
    assert keyed.requeue(*(value for value, _ in first)) == 3
    assert sorted(m.decode() for m in keyed.client.zrange(keyed.queue.ready, 0, -1)) == ["a", "b"]
    assert payloads(keyed.pop(1)) == ["a0"]  # requeued sites go first, its priority kept
    assert sorted(payloads(keyed.pop(5))) == ["b0", "b1"]


def test_nothing_is_left_behind(keyed: Keyed, redis_client: redis.Redis) -> None:
    keyed.push(*((f"{s}{i}", i, s) for s in ("x", "y", "z") for i in range(4)))
    popped = keyed.pop(5)
    keyed.requeue(*(value for value, _ in popped))
    while keyed.pop(3):
        pass
    assert len(keyed.queue) == 0 and keyed.queue.sites() == 0
    assert sorted(k.decode() for k in redis_client.keys("t:*")) == [SEQ]
    keyed.push(("again", 0, "x"))
    keyed.queue.clear()
    assert redis_client.keys("t:requests*") == [] and len(keyed.queue) == 0


def test_another_class_data_is_a_one_line_error(redis_client: redis.Redis) -> None:
    redis_client.zadd(QK, {"0000000000000001old": 0})
    problem = KeyedPriorityQueue(redis_client, QK).type_error()
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"SCHEDULER_QUEUE_KEY {QK!r} holds a Redis zset")
    assert "SCHEDULER_QUEUE_CLASS = 'crawlfleet.frontier.queues.PriorityQueue'" in problem
    assert "crawlfleet purge" in problem
    redis_client.delete(QK)
    Keyed(redis_client).push(("p", 0, "a"))
    problem = PriorityQueue(redis_client, QK).type_error()
    assert problem is not None and "holds a Redis hash" in problem and "\n" not in problem
    assert KeyedPriorityQueue(redis_client, QK).type_error() is None


def test_the_site_of_a_url_follows_the_key_kind(redis_client: redis.Redis) -> None:
    assert KeyedPriorityQueue(redis_client, QK).site("https://WWW.A.example:8/x") == "www.a.example"
    assert KeyedPriorityQueue(redis_client, QK, "domain").site("https://www.shop.example.com/") == (
        "example.com"
    )
    assert PriorityQueue(redis_client, QK).site("https://www.a.example/") == ""


SITES = st.sampled_from(
    ["", ":", "a:b", "{x}", "{", "}", "|", "1|2|", "é.example", "站点", "x" * 3000]
)
SITE = SITES | st.text(max_size=40)
PAYLOAD = st.binary(min_size=0, max_size=60) | st.sampled_from([b"|", b"0|1|a", b"\x00" * 5])


@pytest.mark.fuzz
@given(
    entries=st.lists(st.tuples(PAYLOAD, st.integers(-5, 5), SITE), max_size=40),
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=8),
    requeue_every=st.integers(1, 4),
)
def test_hostile_sites_and_payloads_lose_nothing(
    redis_client: redis.Redis,
    entries: list[tuple[bytes, int, str]],
    sizes: list[int],
    requeue_every: int,
) -> None:
    redis_client.flushdb()
    keyed = Keyed(redis_client)
    for entry in entries:
        keyed.push(entry)
    out: list[bytes] = []
    for round_, size in enumerate(sizes * 20):
        popped = keyed.pop(size)
        if not popped:
            break
        assert len(keyed.queue) == len(entries) - len(out) - len(popped)
        if round_ % requeue_every == 0:  # a dead worker's leases come back
            keyed.requeue(*(value for value, _ in popped))
        else:
            out += [payload for _, payload in popped]
    while popped := keyed.pop(50):
        out += [payload for _, payload in popped]
    assert Counter(out) == Counter(payload for payload, _, _ in entries)
    assert len(keyed.queue) == 0 and keyed.queue.sites() == 0
    assert redis_client.keys("t:*") == ([SEQ.encode()] if entries else [])


@pytest.mark.fuzz
@given(st.lists(st.tuples(st.integers(-3, 3), SITE), min_size=1, max_size=30))
def test_hostile_sites_keep_priority_order_within_each_site(
    redis_client: redis.Redis, entries: list[tuple[int, str]]
) -> None:
    redis_client.flushdb()
    keyed = Keyed(redis_client)
    keyed.push(*((f"{i}".encode(), prio, site) for i, (prio, site) in enumerate(entries)))
    order = [int(payload) for _, payload in keyed.pop(len(entries))]
    assert sorted(order) == list(range(len(entries)))
    for site in {site for _, site in entries}:
        mine = [i for i in order if entries[i][1] == site]
        assert mine == sorted(mine, key=lambda i: (-entries[i][0], i))
