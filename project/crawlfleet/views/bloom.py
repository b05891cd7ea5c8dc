"""A crawl's duplicate filter as operators see it: a set's size or a Bloom filter's figures,
summed over the shards of a sharded crawl, cached for the slow ones (``DupefilterCache``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import redis

from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import BloomConfigError
from crawlfleet.frontier.shards import crawl_shards


def dupefilter_figures(
    client: redis.Redis, spider: str, frontier: dict[str, str]
) -> dict[str, Any]:
    """The crawl's fingerprints: its filter's figures, summed over the shards of a sharded crawl
    (``key`` is the home shard's; the fill and error rates the worst shard's)."""
    cls = frontier.get("dupefilter_class", "")
    info: dict[str, Any] = {
        "class": cls.rsplit(".", 1)[-1] or None,
        "key": None,
        "fingerprints": None,
        "capacity": None,
        "fill_ratio": None,
        "error_rate": None,
        "design_error_rate": None,
        "over_capacity": None,
    }
    if not cls:
        return info
    shards = crawl_shards(client, spider, frontier)
    info["key"] = shards[0].dupefilter_key
    if cls.endswith("BloomDupeFilter"):
        try:
            blooms = [BloomFilter.existing(client, s.dupefilter_key).info() for s in shards]
        except BloomConfigError:
            return info
        info.update(
            fingerprints=_sum_or_none(b["count_estimate"] for b in blooms),
            capacity=sum(b["capacity"] for b in blooms),
            fill_ratio=max(b["fill_ratio"] for b in blooms),
            error_rate=max(b["estimated_error_rate"] for b in blooms),
            design_error_rate=blooms[0]["error_rate"],
            over_capacity=any(b["over_capacity"] for b in blooms),
        )
    else:
        sizes = [
            int(client.scard(s.dupefilter_key))
            for s in shards
            if client.type(s.dupefilter_key) in (b"set", "set")
        ]
        if sizes:
            info["fingerprints"] = sum(sizes)
    return info


def _sum_or_none(values: Iterable[Any]) -> int | None:
    """The sum, or None when any is None (a count the filter cannot tell)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


class DupefilterCache:
    """Reuse a spider's Bloom filter figures for ``ttl`` seconds.

    They change slowly and come from ``BITCOUNT`` over the whole filter (171 MiB for 10^8 URLs
    at 0.1 %): Redis time the frontier should not pay on every redraw of ``status --watch`` or
    every poll of the dashboard. A set's size (``SCARD``) costs nothing and is never cached.
    """

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}

    def get(self, client: redis.Redis, spider: str, frontier: dict[str, str]) -> dict[str, Any]:
        now = time.monotonic()
        entry = self._entries.get(spider)
        if entry is not None and now - entry[0] < self.ttl:
            return entry[1]
        info = dupefilter_figures(client, spider, frontier)
        if info["fill_ratio"] is not None:
            self._entries[spider] = (now, info)
        return info
