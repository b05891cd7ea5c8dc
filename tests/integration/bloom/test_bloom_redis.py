"""BloomFilter against a real redis-server: correctness, error rate, atomicity, blocks, errors."""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter

import pytest
import redis
from support.bloomdata import add_as_a_worker, add_in_batches, count_present, fingerprints

from crawlfleet.frontier import bloom
from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import BloomConfigError, expected_error_rate


def test_add_contains_and_repeats(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=10_000, error_rate=0.001)
    fp_a, fp_b = fingerprints(2, seed=1)
    assert fp_a not in bf
    assert bf.add(fp_a) is True
    assert fp_a in bf
    assert bf.add(fp_a) is False
    # In one batch, the first occurrence is new and later ones are not.
    assert bf.add_many([fp_b, fp_a, fp_b]) == [True, False, False]
    assert bf.add_many([]) == []
    assert bf.contains_many([fp_a, fp_b]) == [True, True]


def test_no_false_negatives(redis_client: redis.Redis) -> None:
    fps = fingerprints(60_000, seed=2)
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=50_000, error_rate=0.01)
    add_in_batches(bf, fps)  # 20 % over capacity: more false positives, never a false negative
    assert count_present(bf, fps) == len(fps)
    assert not any(bf.add_many(fps[:5000]))


@pytest.mark.parametrize(
    ("capacity", "error_rate", "blocks"),
    [(100_000, 0.01, None), (100_000, 0.05, None), (120_000, 0.003, None), (100_000, 0.02, 4)],
)
def test_false_positive_rate_matches_theory_at_design_load(
    redis_client: redis.Redis, capacity: int, error_rate: float, blocks: int | None
) -> None:
    bf = BloomFilter(
        redis_client, "s:bloomfilter", capacity=capacity, error_rate=error_rate, blocks=blocks
    )
    add_in_batches(bf, fingerprints(capacity, seed=capacity))
    theory = expected_error_rate(bf.bits, bf.hashes, capacity)
    # Enough fresh probes to expect >= 1000 false positives: +-15 % is then more than 4.7 sigma.
    probes = max(100_000, round(1000 / theory))
    measured = count_present(bf, fingerprints(probes, seed=capacity + 1)) / probes
    assert measured == pytest.approx(theory, rel=0.15)
    info = bf.info()
    assert info["count_estimate"] == pytest.approx(capacity, rel=0.02)
    assert info["estimated_error_rate"] == pytest.approx(theory, rel=0.05)


def _add_share(args: tuple[str, int, list[bytes]]) -> list[bytes]:
    """One worker process: add its share, half one by one and half in small batches."""
    url, blocks, fps = args
    client = redis.Redis.from_url(url)
    bf = BloomFilter(client, "s:bloomfilter", capacity=2_000_000, error_rate=0.0001, blocks=blocks)
    new = add_as_a_worker(bf, fps)
    client.close()
    return new


@pytest.mark.parametrize("blocks", [1, 4])
def test_concurrent_processes_agree_on_one_new_per_fingerprint(redis_url: str, blocks: int) -> None:
    universe = fingerprints(8_000, seed=3)
    rng = random.Random(4)
    shares = []
    for _ in range(4):
        share = rng.sample(universe, 5_000)  # overlapping: each fingerprint in ~2.5 shares
        shares.append((redis_url, blocks, share))
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(_add_share, shares)
    counts = Counter(fp for new in results for fp in new)
    offered = {fp for _, _, share in shares for fp in share}
    assert set(counts) == offered
    assert set(counts.values()) == {1}


def test_blocks_hold_all_bits_of_a_fingerprint(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "book:bloomfilter", capacity=10_000, error_rate=0.01, blocks=4)
    assert bf.block_keys == [f"{{book:bloomfilter:{i}}}" for i in range(4)]
    fp = fingerprints(1, seed=5)[0]
    block, offsets = bf.layout.offsets(fp)
    # Blocks are created empty at their full size.
    block_bytes = -(-bf.layout.block_bits // 8)
    assert [redis_client.strlen(k) for k in bf.block_keys] == [block_bytes] * 4
    assert bf.add(fp)
    key = bf.block_keys[block]
    assert [redis_client.bitcount(k) for k in bf.block_keys].count(0) == 3
    assert redis_client.bitcount(key) == len(set(offsets))
    assert all(redis_client.getbit(key, offset) for offset in offsets)
    add_in_batches(bf, fingerprints(10_000, seed=6))
    assert [redis_client.strlen(k) for k in bf.block_keys] == [block_bytes] * 4
    assert redis_client.hgetall("book:bloomfilter:meta")[b"blocks"] == b"4"


def test_info_reports_size_fill_and_design_load(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=20_000, error_rate=0.01)
    fps = fingerprints(30_000, seed=7)
    add_in_batches(bf, fps[:18_000])
    info = bf.info()
    assert info["bits"] == bf.bits == 191_702
    assert info["size_bytes"] == 23_963
    assert info["hashes"] == 7
    assert info["capacity"] == 20_000
    assert info["count_estimate"] == pytest.approx(18_000, rel=0.03)
    assert 0.4 < info["fill_ratio"] < 0.5
    assert info["estimated_error_rate"] == pytest.approx(info["fill_ratio"] ** 7)
    assert info["over_capacity"] is False
    assert info["warning"] is None
    add_in_batches(bf, fps[18_000:])
    info = bf.info()
    assert info["over_capacity"] is True
    assert info["warning"].startswith("s:bloomfilter is past its design load (20,000 fingerprints)")


def test_existing_reopens_with_stored_parameters(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=5_000, error_rate=0.01, blocks=2)
    fps = fingerprints(100, seed=8)
    bf.add_many(fps)
    again = BloomFilter.existing(redis_client, "s:bloomfilter")
    assert (again.bits, again.hashes, again.blocks) == (bf.bits, bf.hashes, 2)
    assert all(again.contains_many(fps))
    with pytest.raises(BloomConfigError, match="no crawlfleet Bloom filter at key 'x'"):
        BloomFilter.existing(redis_client, "x")


def test_clear_forgets_fingerprints_but_keeps_the_filter(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=5_000, error_rate=0.01, blocks=2)
    fps = fingerprints(100, seed=9)
    bf.add_many(fps)
    bf.clear()
    assert [redis_client.bitcount(k) for k in bf.block_keys] == [0, 0]
    assert not any(bf.contains_many(fps))
    assert all(bf.add_many(fps))
    BloomFilter(redis_client, "s:bloomfilter", capacity=5_000, error_rate=0.01, blocks=2)


def test_scripts_reload_after_script_flush(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=50_000, error_rate=0.01, blocks=2)
    fps = fingerprints(3 * bloom.SCRIPT_BATCH, seed=10)
    redis_client.script_flush()
    assert all(bf.add_many(fps))  # several scripts in one pipeline, each NOSCRIPT at first
    redis_client.script_flush()
    assert bf.add(fps[0]) is False


def test_key_of_another_type_is_named(redis_client: redis.Redis) -> None:
    redis_client.rpush("s:bloomfilter", "x")
    with pytest.raises(BloomConfigError, match=r"'s:bloomfilter' holds a list") as info:
        BloomFilter(redis_client, "s:bloomfilter", capacity=1000, error_rate=0.01)
    assert "\n" not in str(info.value)
    redis_client.set("t:bloomfilter:meta", "x")
    with pytest.raises(BloomConfigError, match="'t:bloomfilter:meta'"):
        BloomFilter(redis_client, "t:bloomfilter", capacity=1000, error_rate=0.01)
    redis_client.sadd("{u:bloomfilter:1}", "x")
    with pytest.raises(BloomConfigError, match=r"'\{u:bloomfilter:1\}' holds a set"):
        BloomFilter(redis_client, "u:bloomfilter", capacity=1000, error_rate=0.01, blocks=2)
    # The failures wrote nothing.
    assert not redis_client.exists("s:bloomfilter:meta", "u:bloomfilter:meta")


def test_foreign_bitmap_is_refused(redis_client: redis.Redis) -> None:
    # scrapy-redis-bloomfilter keeps its bitmap at the same key name, without metadata.
    redis_client.setbit("book:bloomfilter", 12345, 1)
    with pytest.raises(BloomConfigError, match="string without Bloom filter metadata"):
        BloomFilter(redis_client, "book:bloomfilter", capacity=1000, error_rate=0.01)


def test_other_parameters_for_an_existing_filter_are_refused(redis_client: redis.Redis) -> None:
    BloomFilter(redis_client, "s:bloomfilter", capacity=1000, error_rate=0.01)
    with pytest.raises(BloomConfigError, match="BLOOMFILTER_CAPACITY") as info:
        BloomFilter(redis_client, "s:bloomfilter", capacity=2000, error_rate=0.01)
    assert "bits=9586" in str(info.value)
    assert "\n" not in str(info.value)


def test_key_replaced_after_opening_gives_a_named_error(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=1000, error_rate=0.01)
    redis_client.delete("s:bloomfilter")
    redis_client.rpush("s:bloomfilter", "x")
    with pytest.raises(BloomConfigError, match="'s:bloomfilter'"):
        bf.add(fingerprints(1, seed=11)[0])
    with pytest.raises(BloomConfigError, match="'s:bloomfilter'"):
        bf.add_many(fingerprints(5000, seed=12))
