"""The scalable BloomFilter against a real redis-server: layers, error rate, atomicity, reuse."""

from __future__ import annotations

import logging
import math
import multiprocessing
import random
from collections import Counter

import pytest
import redis
from support.bloomdata import add_as_a_worker, add_in_batches, count_present, fingerprints

from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import (
    HEADER_BITS,
    BloomConfigError,
    BloomLayout,
    ScalableLayout,
)


def layer_counts(client: redis.Redis, layout: ScalableLayout) -> list[int]:
    """The fingerprints counted in each layer's header (0 for a layer not created)."""
    return [int(client.bitfield(key).get("u32", 0).execute()[0]) for key in layout.layer_keys]


def scalable(client: redis.Redis, capacity: int, error_rate: float, initial: int) -> BloomFilter:
    return BloomFilter(
        client,
        "s:bloomfilter",
        capacity=capacity,
        error_rate=error_rate,
        scalable=True,
        initial_capacity=initial,
    )


def test_layers_are_added_as_they_fill(redis_client: redis.Redis) -> None:
    bf = scalable(redis_client, 100_000, 0.001, 1000)
    layout = bf.layout
    assert isinstance(layout, ScalableLayout)
    assert layout.layer_capacity[:3] == [1000, 3666, 13538]
    # Only the first layer exists at first, at its full size, its header saying "1 layer".
    sizes = [-(-(HEADER_BITS + m) // 8) for m in layout.layer_bits]
    assert len(sizes) == 5
    assert [redis_client.strlen(k) for k in layout.layer_keys] == [sizes[0], 0, 0, 0, 0]
    assert redis_client.bitfield(layout.layer_keys[0]).get("u16", 32).execute() == [1]
    first = fingerprints(1, seed=20)[0]
    assert first not in bf
    assert bf.add(first) is True
    assert first in bf
    assert bf.add(first) is False
    # Its bits are where the layout (the Python mirror of the Lua) says, in layer 0.
    assert all(redis_client.getbit(layout.layer_keys[0], o) for o in layout.offsets(first)[0])
    assert redis_client.bitcount(layout.layer_keys[0], HEADER_BITS // 8, -1) == len(
        set(layout.offsets(first)[0])
    )
    fps = fingerprints(10_000, seed=21)
    new = add_in_batches(bf, fps)
    counts = layer_counts(redis_client, layout)
    # layers 0 and 1 filled to their capacity, the rest went to layer 2
    assert counts[:2] == [1000, 3666]
    assert sum(counts) == 1 + sum(new) and sum(new) >= 9_990  # a few false positives at most
    assert [redis_client.strlen(k) for k in layout.layer_keys] == [*sizes[:3], 0, 0]
    # No false negatives, whichever layer a fingerprint went to.
    assert count_present(bf, fps) == len(fps)
    assert not any(add_in_batches(bf, fps))
    info = bf.info()
    assert (info["layers"], info["max_layers"], info["keys"]) == (3, 5, layout.layer_keys[:3])
    assert info["count_estimate"] == sum(counts)
    assert info["allocated_bytes"] == sum(sizes[:3])
    assert info["bits"] == sum(layout.layer_bits[:3])
    assert info["hashes"] == layout.first_hashes + 2
    assert info["over_capacity"] is False and info["warning"] is None


@pytest.mark.parametrize(
    ("capacity", "error_rate", "initial"), [(60_000, 0.02, 1000), (40_000, 0.05, 1000)]
)
def test_false_positive_rate_matches_theory_of_the_layers(
    redis_client: redis.Redis, capacity: int, error_rate: float, initial: int
) -> None:
    bf = scalable(redis_client, capacity, error_rate, initial)
    layout = bf.layout
    assert isinstance(layout, ScalableLayout)
    add_in_batches(bf, fingerprints(capacity, seed=capacity))
    counts = layer_counts(redis_client, layout)
    assert len(layout.layer_bits) >= 4 and all(counts)  # every layer in use
    # A probe is a false positive when any layer holds all its bits: layer i (m bits, k hashes,
    # n fingerprints) says yes with probability (1 - e^(-kn/m))^k.
    theory = 1 - math.prod(
        1 - (1 - math.exp(-k * n / m)) ** k
        for m, k, n in zip(layout.layer_bits, layout.layer_hashes, counts, strict=True)
    )
    assert theory <= error_rate
    # Enough fresh probes to expect >= 1000 false positives: +-15 % is then more than 4.7 sigma.
    probes = round(1000 / theory)
    measured = count_present(bf, fingerprints(probes, seed=capacity + 1)) / probes
    assert measured == pytest.approx(theory, rel=0.15)
    assert measured <= error_rate
    info = bf.info()
    assert info["estimated_error_rate"] == pytest.approx(theory, rel=0.05)
    assert info["design_error_rate"] <= error_rate


def _add_share(args: tuple[str, list[bytes]]) -> list[bytes]:
    """One worker process: add its share, half one by one and half in small batches."""
    url, fps = args
    client = redis.Redis.from_url(url)
    bf = scalable(client, 20_000, 1e-6, 500)
    new = add_as_a_worker(bf, fps)
    client.close()
    return new


def test_concurrent_processes_agree_on_one_new_per_fingerprint_as_layers_grow(
    redis_url: str, redis_client: redis.Redis
) -> None:
    universe = fingerprints(8_000, seed=22)
    rng = random.Random(23)
    shares = [(redis_url, rng.sample(universe, 5_000)) for _ in range(4)]
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(_add_share, shares)
    counts = Counter(fp for new in results for fp in new)
    offered = {fp for _, share in shares for fp in share}
    assert set(counts) == offered
    assert set(counts.values()) == {1}
    layout = scalable(redis_client, 20_000, 1e-6, 500).layout
    assert isinstance(layout, ScalableLayout)
    added = layer_counts(redis_client, layout)
    assert sum(added) == len(offered)
    assert len([n for n in added if n]) == 3
    assert added[:2] == layout.layer_capacity[:2]  # each layer grew exactly once, when full


def test_an_existing_fixed_filter_keeps_working(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    fixed = BloomFilter(redis_client, "s:bloomfilter", capacity=5_000, error_rate=0.01)
    fps = fingerprints(200, seed=24)
    fixed.add_many(fps)
    with caplog.at_level(logging.INFO, logger="crawlfleet.frontier.bloom"):
        bf = scalable(redis_client, 100_000, 0.001, 1000)
    assert isinstance(bf.layout, BloomLayout)
    assert (bf.bits, bf.hashes, bf.block_keys) == (fixed.bits, fixed.hashes, ["s:bloomfilter"])
    assert "fixed filter of 47926 bits" in caplog.text
    assert all(bf.contains_many(fps))
    assert not any(bf.add_many(fps))
    assert redis_client.keys("s:bloomfilter:?") == []  # no layer was added beside it
    assert bf.info()["layers"] == 1


def test_existing_clear_and_destroy(redis_client: redis.Redis) -> None:
    bf = scalable(redis_client, 50_000, 1e-6, 500)
    layout = bf.layout
    assert isinstance(layout, ScalableLayout)
    fps = fingerprints(3000, seed=25)
    bf.add_many(fps)
    again = BloomFilter.existing(redis_client, "s:bloomfilter")
    assert isinstance(again.layout, ScalableLayout)
    assert again.layout.layer_bits == layout.layer_bits
    assert all(again.contains_many(fps))
    assert again.info()["layers"] == 3
    bf.clear()
    assert [redis_client.exists(k) for k in layout.layer_keys] == [1, 0, 0, 0, 0]
    assert layer_counts(redis_client, layout)[0] == 0
    assert not any(bf.contains_many(fps))
    assert all(bf.add_many(fps))
    BloomFilter.destroy(redis_client, BloomLayout("s:bloomfilter", 1000, 0.01))
    assert redis_client.keys("*") == []


def test_other_parameters_for_an_existing_scalable_filter_are_refused(
    redis_client: redis.Redis,
) -> None:
    scalable(redis_client, 50_000, 0.01, 500)
    with pytest.raises(BloomConfigError, match="INITIAL_CAPACITY") as info:
        scalable(redis_client, 50_000, 0.01, 1000)
    assert "scheme=sbf-v1, layer_bits=" in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(BloomConfigError, match="scheme=sbf-v1"):
        BloomFilter(redis_client, "s:bloomfilter", capacity=50_000, error_rate=0.01)


def test_key_of_another_type_is_named(redis_client: redis.Redis) -> None:
    redis_client.rpush("s:bloomfilter", "x")
    with pytest.raises(BloomConfigError, match=r"'s:bloomfilter' holds a list"):
        scalable(redis_client, 50_000, 0.01, 500)
    assert not redis_client.exists("s:bloomfilter:meta")


def test_foreign_bitmap_is_refused(redis_client: redis.Redis) -> None:
    # scrapy-redis-bloomfilter keeps its bitmap at the same key name, without metadata.
    redis_client.setbit("s:bloomfilter", 12345, 1)
    with pytest.raises(BloomConfigError, match="string without Bloom filter metadata"):
        scalable(redis_client, 50_000, 0.01, 500)
