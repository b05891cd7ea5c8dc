"""Fingerprints for the Bloom filter tests, and adding or probing many of them in batches."""

from __future__ import annotations

import random

from crawlfleet.frontier.bloom import BloomFilter


def fingerprints(count: int, seed: int) -> list[bytes]:
    """``count`` random 20-byte digests, like Scrapy's SHA-1 request fingerprints."""
    data = random.Random(seed).randbytes(20 * count)
    return [data[i : i + 20] for i in range(0, len(data), 20)]


def add_as_a_worker(bf: BloomFilter, fps: list[bytes]) -> list[bytes]:
    """What one of several workers adding ``fps`` finds new: half one by one, half in small
    batches (as a crawl's dupefilter calls it)."""
    half = len(fps) // 2
    new = [fp for fp in fps[:half] if bf.add(fp)]
    for start in range(half, len(fps), 50):
        batch = fps[start : start + 50]
        new += [fp for fp, flag in zip(batch, bf.add_many(batch), strict=True) if flag]
    return new


def add_in_batches(bf: BloomFilter, fps: list[bytes], batch: int = 20_000) -> list[bool]:
    flags: list[bool] = []
    for start in range(0, len(fps), batch):
        flags += bf.add_many(fps[start : start + batch])
    return flags


def count_present(bf: BloomFilter, fps: list[bytes], batch: int = 50_000) -> int:
    return sum(
        sum(bf.contains_many(fps[start : start + batch])) for start in range(0, len(fps), batch)
    )
