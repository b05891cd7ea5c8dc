"""The pool in Redis: a sorted set of proxies scored 0-100, each change one atomic step.

Scores: a new proxy enters at 10 (an existing one keeps its score), a passing test sets 100,
a failure subtracts a step and a proxy that reaches 0 is removed — in one script, so two
processes reporting the same proxy at once can neither resurrect it nor push it below 0.
``random`` picks among the best-scored members by index (O(log N) per pick) instead of
reading every max-score member as the anchor's ``ZRANGEBYSCORE`` + ``random.choice`` does.
"""

from __future__ import annotations

import random as _random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from crawlfleet.hub.connect import get_async_redis
from crawlfleet.hub.fleetkeys import pool_tag
from crawlfleet.hub.lua import read_lua

INITIAL_SCORE = 10
MAX_SCORE = 100
# Score bands reported by /metrics: (label, min, max), inclusive.
BANDS = (("100", 100, 100), ("50-99", 50, 99), ("10-49", 10, 49), ("1-9", 1, 9))

_ADD = read_lua("crawlfleet.proxypool", "add.lua")

# Returns the new score, 0 when the proxy was removed, -1 when it was not in the pool.
_DECREASE = read_lua("crawlfleet.proxypool", "decrease.lua")

# ARGV[1] = how many; ARGV[2..] = uniform randoms in [0, 1) from the caller (scripts stay
# deterministic). Picks distinct indexes in the best band with Floyd's algorithm; when the band
# is smaller than the number asked for, the window grows to the best N proxies by score.
_RANDOM = read_lua("crawlfleet.proxypool", "random.lua")


@dataclass(frozen=True)
class AddResult:
    added: int
    existing: int
    full: int


def connect(url: str) -> aioredis.Redis:
    """The service's async client: short timeouts and few retries, so a down Redis answers fast."""
    return get_async_redis(
        url,
        decode_responses=True,
        socket_connect_timeout=2,
        socket_timeout=5,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
    )


class ProxyStore:
    """Scored proxies under ``key``; statistics counters in the hash ``<key>:stats``."""

    def __init__(self, client: aioredis.Redis, key: str, max_size: int) -> None:
        self.client = client
        # through a Redis Cluster client, {<key>} and {<key>}:stats: the pool in one slot
        self.key = pool_tag(key, client)
        self.stats_key = f"{self.key}:stats"
        self.max_size = max_size
        self._add = client.register_script(_ADD)
        self._decrease = client.register_script(_DECREASE)
        self._random = client.register_script(_RANDOM)

    async def add(self, proxies: Sequence[str], batch: int = 500) -> AddResult:
        """Add new proxies at score 10 (existing ones untouched) while the pool is below its cap."""
        added = existing = full = 0
        for start in range(0, len(proxies), batch):
            chunk = proxies[start : start + batch]
            a, e, f = await self._add(keys=[self.key], args=[INITIAL_SCORE, self.max_size, *chunk])
            added, existing, full = added + int(a), existing + int(e), full + int(f)
        return AddResult(added, existing, full)

    async def mark_good(self, proxy: str) -> None:
        """Set the score to 100 if the proxy is still in the pool (never re-adds a removed one)."""
        await self.client.zadd(self.key, {proxy: MAX_SCORE}, xx=True)

    async def decrease(self, proxy: str, step: int) -> int | None:
        """Subtract ``step``; the new score (0: removed), or None if it was not in the pool."""
        result = int(await self._decrease(keys=[self.key], args=[proxy, step]))
        return None if result < 0 else result

    async def remove(self, proxy: str) -> bool:
        return bool(await self.client.zrem(self.key, proxy))

    async def random(self, count: int = 1) -> list[str]:
        """Up to ``count`` distinct proxies drawn at random among the best-scored ones."""
        randoms = [_random.random() for _ in range(count)]
        members = list(await self._random(keys=[self.key], args=[count, *randoms]))
        _random.shuffle(members)
        return members

    async def count(self) -> int:
        return int(await self.client.zcard(self.key))

    async def all(self) -> list[tuple[str, float]]:
        """Every proxy with its score, best first (this one does read the whole set)."""
        pairs = await self.client.zrevrange(self.key, 0, -1, withscores=True)
        return [(member, float(score)) for member, score in cast(list[tuple[str, float]], pairs)]

    async def bands(self) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        for _, low, high in BANDS:
            pipe.zcount(self.key, low, high)
        counts = await pipe.execute()
        return {label: int(n) for (label, _, _), n in zip(BANDS, counts, strict=True)}

    async def scan(self, batch: int = 500) -> AsyncIterator[list[str]]:
        """Every member in batches, without holding the whole set in memory."""
        chunk: list[str] = []
        async for member, _ in self.client.zscan_iter(self.key, count=batch):
            chunk.append(member)
            if len(chunk) >= batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    async def incr_stats(self, **counts: int) -> None:
        """Add to the shared counters (one round trip) so /metrics sees every process's work."""
        pipe = self.client.pipeline(transaction=False)
        for name, value in counts.items():
            if value:
                pipe.hincrby(self.stats_key, name, value)
        if len(pipe):
            await pipe.execute()

    async def stats(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in (await self.client.hgetall(self.stats_key)).items()}
