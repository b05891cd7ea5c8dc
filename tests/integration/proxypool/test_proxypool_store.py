"""The Redis store on a real redis-server: scores, cap, atomic decrements, best-band selection."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis

from crawlfleet.proxypool.store import ProxyStore, connect

T = TypeVar("T")
KEY = "pp:test"


def run(redis_url: str, body: Callable[[ProxyStore], Awaitable[T]], max_size: int = 1000) -> T:
    async def main() -> T:
        client = connect(redis_url)
        try:
            return await body(ProxyStore(client, KEY, max_size))
        finally:
            await client.aclose()

    return asyncio.run(main())


def proxies(n: int, prefix: str = "10.0.0") -> list[str]:
    return [f"http://{prefix}.{i % 250}:{1000 + i}" for i in range(n)]


def test_new_proxies_enter_at_10_without_touching_existing(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(store: ProxyStore) -> None:
        first = await store.add(["http://1.1.1.1:80", "http://2.2.2.2:80"])
        assert (first.added, first.existing, first.full) == (2, 0, 0)
        await store.mark_good("http://1.1.1.1:80")
        again = await store.add(["http://1.1.1.1:80", "http://2.2.2.2:80", "http://3.3.3.3:80"])
        assert (again.added, again.existing, again.full) == (1, 2, 0)

    run(redis_url, body)
    assert dict(redis_client.zrange(KEY, 0, -1, withscores=True)) == {
        b"http://1.1.1.1:80": 100.0,
        b"http://2.2.2.2:80": 10.0,
        b"http://3.3.3.3:80": 10.0,
    }


def test_cap_refuses_new_proxies_when_full(redis_url: str, redis_client: redis.Redis) -> None:
    async def body(store: ProxyStore) -> tuple[int, int, int]:
        result = await store.add(proxies(5), batch=2)
        return result.added, result.existing, result.full

    assert run(redis_url, body, max_size=3) == (3, 0, 2)
    assert redis_client.zcard(KEY) == 3


def test_decrease_reaches_zero_and_removes(redis_url: str, redis_client: redis.Redis) -> None:
    async def body(store: ProxyStore) -> list[int | None]:
        await store.add(["http://1.1.1.1:80"])
        return [await store.decrease("http://1.1.1.1:80", 4) for _ in range(4)]

    assert run(redis_url, body) == [6, 2, 0, None]
    assert redis_client.zcard(KEY) == 0


def test_mark_good_never_resurrects_a_removed_proxy(
    redis_url: str, redis_client: redis.Redis
) -> None:
    async def body(store: ProxyStore) -> None:
        await store.add(["http://1.1.1.1:80"])
        assert await store.remove("http://1.1.1.1:80")
        await store.mark_good("http://1.1.1.1:80")

    run(redis_url, body)
    assert redis_client.zcard(KEY) == 0


def test_concurrent_decreases_are_atomic(redis_url: str, redis_client: redis.Redis) -> None:
    """Two clients and many tasks hit one proxy: the total is exact and it never goes below 0."""

    async def main() -> list[int | None]:
        clients = [connect(redis_url), connect(redis_url)]
        stores = [ProxyStore(c, KEY, 100) for c in clients]
        await stores[0].add(["http://1.1.1.1:80", "http://2.2.2.2:80"])
        await stores[0].mark_good("http://1.1.1.1:80")
        await stores[0].mark_good("http://2.2.2.2:80")
        results = await asyncio.gather(
            *(stores[i % 2].decrease("http://1.1.1.1:80", 3) for i in range(40)),
            *(stores[i % 2].decrease("http://2.2.2.2:80", 1) for i in range(30)),
        )
        for client in clients:
            await client.aclose()
        return list(results[:40])

    first = asyncio.run(main())
    assert redis_client.zscore(KEY, "http://2.2.2.2:80") == 70.0
    assert redis_client.zscore(KEY, "http://1.1.1.1:80") is None
    # 100 / 3: 33 decrements leave 1, the 34th removes it, the other 6 find nothing.
    assert Counter(r is None for r in first) == {False: 34, True: 6}
    assert first.count(0) == 1


def test_random_picks_only_the_best_band(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.zadd(KEY, {p: 10 for p in proxies(300)})
    best = proxies(5, prefix="172.16.0")
    redis_client.zadd(KEY, {p: 100 for p in best})

    async def body(store: ProxyStore) -> tuple[Counter[str], list[list[str]]]:
        seen: Counter[str] = Counter()
        for _ in range(200):
            seen.update(await store.random())
        many = [await store.random(5) for _ in range(20)]
        return seen, many

    seen, many = run(redis_url, body)
    assert set(seen) == set(best)
    assert min(seen.values()) > 10  # every best proxy gets picked, roughly evenly
    for picks in many:
        assert sorted(picks) == sorted(best)  # distinct, all from the band


def test_random_count_larger_than_band_takes_the_next_best(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.zadd(KEY, {"http://1.1.1.1:1": 100, "http://1.1.1.1:2": 100})
    redis_client.zadd(KEY, {"http://2.2.2.2:1": 50, "http://3.3.3.3:1": 10, "http://4.4.4.4:1": 5})

    async def body(store: ProxyStore) -> list[list[str]]:
        return [await store.random(4), await store.random(10), await store.random(1)]

    four, ten, one = run(redis_url, body)
    assert sorted(four) == [
        "http://1.1.1.1:1",
        "http://1.1.1.1:2",
        "http://2.2.2.2:1",
        "http://3.3.3.3:1",
    ]
    assert len(ten) == 5 and len(set(ten)) == 5
    assert one[0] in ("http://1.1.1.1:1", "http://1.1.1.1:2")


def test_random_on_an_empty_pool(redis_url: str) -> None:
    async def body(store: ProxyStore) -> list[str]:
        return await store.random(3)

    assert run(redis_url, body) == []


def test_random_does_not_read_the_band(redis_url: str, redis_client: redis.Redis) -> None:
    """The selection script reads O(count) members whatever the band size (Redis's own counts)."""
    redis_client.zadd(KEY, {p: 100 for p in proxies(5000)})
    redis_client.config_resetstat()

    async def body(store: ProxyStore) -> list[str]:
        return await store.random(2)

    assert len(run(redis_url, body)) == 2
    stats = redis_client.info("commandstats")
    assert stats["cmdstat_zrevrange"]["calls"] == 3  # the top member, then one per pick
    assert stats["cmdstat_zcount"]["calls"] == 1
    assert not any(
        name.startswith(("cmdstat_zrangebyscore", "cmdstat_zrange"))
        for name in stats
        if name != "cmdstat_zrevrange"
    )


def test_bands_scan_and_stats(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.zadd(
        KEY, {"http://a.b:1": 100, "http://a.b:2": 60, "http://a.b:3": 10, "http://a.b:4": 3}
    )

    async def body(store: ProxyStore) -> tuple[dict[str, int], int, dict[str, int]]:
        members = [m async for batch in store.scan(batch=3) for m in batch]
        await store.incr_stats(tests_passed=2, tests_failed=0)
        await store.incr_stats(tests_passed=1)
        return await store.bands(), len(members), await store.stats()

    bands, scanned, stats = run(redis_url, body)
    assert bands == {"100": 1, "50-99": 1, "10-49": 1, "1-9": 1}
    assert scanned == 4
    assert stats == {"tests_passed": 3}
