"""Bloom filter sizing, hashing and block layout: pure computation, no Redis."""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections import Counter

import pytest
from redis.crc import key_slot
from scrapy.settings import Settings

from crawlfleet.frontier.bloomlayout import (
    HEADER_BITS,
    MAX_BLOCK_BITS,
    BloomConfigError,
    BloomLayout,
    ScalableLayout,
    expected_error_rate,
    layout_from_settings,
    optimal_bits,
    optimal_hashes,
)


@pytest.mark.parametrize(
    ("n", "p", "bits", "hashes"),
    [
        # m = ceil(-n ln p / ln(2)^2), k = round(m/n ln 2), worked out independently.
        (1_000, 0.1, 4_793, 3),
        (100_000, 0.01, 958_506, 7),
        (1_000_000, 0.01, 9_585_059, 7),
        (1_000_000, 0.001, 14_377_588, 10),
        (100_000_000, 0.001, 1_437_758_757, 10),
        (10_000, 0.5, 14_427, 1),
    ],
)
def test_sizing_follows_the_formulas(n: int, p: float, bits: int, hashes: int) -> None:
    assert optimal_bits(n, p) == math.ceil(-n * math.log(p) / math.log(2) ** 2)
    assert abs(optimal_bits(n, p) - bits) <= 1
    assert optimal_hashes(optimal_bits(n, p), n) == hashes
    layout = BloomLayout("s:bloomfilter", n, p)
    assert layout.bits == optimal_bits(n, p)
    assert layout.hashes == hashes
    assert layout.blocks == 1
    # Sized this way, the expected error rate at capacity is the one asked for.
    assert expected_error_rate(layout.bits, layout.hashes, n) == pytest.approx(p, rel=0.02)


def test_expected_error_rate() -> None:
    assert expected_error_rate(1000, 3, 0) == 0.0
    assert expected_error_rate(1000, 3, 100) == pytest.approx((1 - math.exp(-0.3)) ** 3)


def test_compatibility_bit_and_hash_number() -> None:
    layout = BloomLayout("s:bloomfilter", 100_000, 0.001, bit=24, hash_number=6)
    assert (layout.bits, layout.hashes, layout.blocks) == (1 << 24, 6, 1)
    # Like scrapy-redis-bloomfilter, a missing half takes its default (bit 30, 6 hashes).
    assert BloomLayout("k", 1000, 0.01, bit=20).hashes == 6
    assert BloomLayout("k", 1000, 0.01, hash_number=4).bits == 1 << 30


def test_compatibility_sizing_warns_above_one_percent(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawlfleet.frontier.bloom"):
        BloomLayout("k", 1_000_000, 0.001, bit=20, hash_number=6)
    [record] = caplog.records
    assert "BLOOMFILTER_BIT=20" in record.getMessage()
    assert "BLOOMFILTER_CAPACITY=1000000" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="crawlfleet.frontier.bloom"):
        BloomLayout("k", 100_000, 0.001, bit=24, hash_number=6)  # about 1e-5 expected
    assert caplog.records == []


def test_large_filters_split_into_blocks_with_hash_tagged_keys() -> None:
    layout = BloomLayout("book:bloomfilter", 10_000_000_000, 0.001)
    total = optimal_bits(10_000_000_000, 0.001)
    assert layout.blocks == math.ceil(total / MAX_BLOCK_BITS) == 34
    assert layout.block_bits <= MAX_BLOCK_BITS
    assert layout.bits >= total
    assert layout.block_keys[:2] == ["{book:bloomfilter:0}", "{book:bloomfilter:1}"]
    # The whole name is the hash tag: blocks spread over cluster slots.
    assert len({key_slot(key.encode()) for key in layout.block_keys}) > 30
    # bit > 32 splits automatically too.
    assert BloomLayout("k", 10**9, 0.001, bit=34).blocks == 4


def test_every_bit_of_a_fingerprint_is_in_one_block() -> None:
    layout = BloomLayout("k", 1_000, 0.01, blocks=8)
    assert layout.block_keys == [f"{{k:{i}}}" for i in range(8)]
    seen: Counter[int] = Counter()
    for _ in range(8_000):
        fp = os.urandom(20)
        block, offsets = layout.offsets(fp)
        assert len(offsets) == layout.hashes
        assert all(0 <= offset < layout.block_bits for offset in offsets)
        key, _ = layout.script_item(fp)
        assert key == layout.block_keys[block]
        seen[block] += 1
    # Uniform over blocks: 1000 expected each.
    assert min(seen.values()) > 850
    assert max(seen.values()) < 1150


def test_offsets_are_double_hashing_of_the_fingerprint_bytes() -> None:
    layout = BloomLayout("k", 100_000, 0.001)
    fp = hashlib.sha1(b"https://example.org/").digest()
    h1 = int.from_bytes(fp[0:8], "big") % layout.block_bits
    h2 = int.from_bytes(fp[8:16], "big") % layout.block_bits
    expected = [(h1 + i * h2 + (i**3 - i) // 6) % layout.block_bits for i in range(10)]
    assert layout.offsets(fp) == (0, expected)
    assert len(set(expected)) == 10
    # Deterministic; another fingerprint gives other bits.
    assert layout.script_item(fp) == layout.script_item(bytes(fp))
    assert layout.offsets(os.urandom(20))[1] != expected


def test_short_fingerprints_are_digested_first() -> None:
    layout = BloomLayout("k", 1_000, 0.01)
    _, a = layout.offsets(b"abc")
    _, b = layout.offsets(b"abd")
    assert a != b
    with pytest.raises(TypeError, match="bytes"):
        layout.script_item("not bytes")


def test_settings_give_the_layout() -> None:
    settings = Settings(
        {"BLOOMFILTER_CAPACITY": "200000", "BLOOMFILTER_ERROR_RATE": "0.01"}, priority="cmdline"
    )
    layout = layout_from_settings(settings, "book")
    assert layout.key == "book:bloomfilter"
    assert (layout.capacity, layout.error_rate) == (200_000, 0.01)
    compat = layout_from_settings(
        Settings({"BLOOMFILTER_BIT": 20, "BLOOMFILTER_HASH_NUMBER": 6}), "book"
    )
    assert (compat.bits, compat.hashes) == (1 << 20, 6)
    other = layout_from_settings(Settings({"BLOOMFILTER_KEY": "bf:%(spider)s"}), "book")
    assert other.key == "bf:book"
    default = layout_from_settings(Settings(), "book")
    assert isinstance(default, ScalableLayout)
    assert (default.capacity, default.error_rate, default.initial_capacity) == (
        100_000_000,
        0.001,
        1_000_000,
    )
    fixed = layout_from_settings(Settings({"BLOOMFILTER_SCALABLE": "False"}), "book")
    assert isinstance(fixed, BloomLayout)
    assert (fixed.capacity, fixed.error_rate, fixed.hashes) == (100_000_000, 0.001, 10)
    blocks = layout_from_settings(Settings({"BLOOMFILTER_BLOCKS": 2}), "book")
    assert isinstance(blocks, BloomLayout) and blocks.blocks == 2
    small = layout_from_settings(Settings({"BLOOMFILTER_INITIAL_CAPACITY": "5000"}), "book")
    assert isinstance(small, ScalableLayout) and small.layer_capacity[0] == 5000


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"BLOOMFILTER_ERROR_RATE": 0}, "BLOOMFILTER_ERROR_RATE"),
        ({"BLOOMFILTER_ERROR_RATE": 1}, "BLOOMFILTER_ERROR_RATE"),
        ({"BLOOMFILTER_ERROR_RATE": -0.1}, "BLOOMFILTER_ERROR_RATE"),
        ({"BLOOMFILTER_ERROR_RATE": "often"}, "BLOOMFILTER_ERROR_RATE"),
        ({"BLOOMFILTER_CAPACITY": 0}, "BLOOMFILTER_CAPACITY"),
        ({"BLOOMFILTER_CAPACITY": -5}, "BLOOMFILTER_CAPACITY"),
        ({"BLOOMFILTER_CAPACITY": "lots"}, "BLOOMFILTER_CAPACITY"),
        ({"BLOOMFILTER_CAPACITY": 1.5}, "BLOOMFILTER_CAPACITY"),
        ({"BLOOMFILTER_BIT": 33, "BLOOMFILTER_BLOCKS": 1}, "BLOOMFILTER_BIT=33"),
        ({"BLOOMFILTER_BIT": 2}, "BLOOMFILTER_BIT"),
        ({"BLOOMFILTER_BIT": 49}, "BLOOMFILTER_BIT"),
        ({"BLOOMFILTER_HASH_NUMBER": 0}, "BLOOMFILTER_HASH_NUMBER"),
        ({"BLOOMFILTER_HASH_NUMBER": 65}, "BLOOMFILTER_HASH_NUMBER"),
        ({"BLOOMFILTER_BLOCKS": 0}, "BLOOMFILTER_BLOCKS"),
        ({"BLOOMFILTER_CAPACITY": 10, "BLOOMFILTER_BLOCKS": 40}, "BLOOMFILTER_BLOCKS"),
        ({"BLOOMFILTER_KEY": "%(nope)s:bloomfilter"}, "BLOOMFILTER_KEY"),
        ({"BLOOMFILTER_SCALABLE": "maybe"}, "BLOOMFILTER_SCALABLE"),
        ({"BLOOMFILTER_SCALABLE": True, "BLOOMFILTER_BIT": 20}, "BLOOMFILTER_BIT"),
        ({"BLOOMFILTER_INITIAL_CAPACITY": 0}, "BLOOMFILTER_INITIAL_CAPACITY"),
        ({"BLOOMFILTER_INITIAL_CAPACITY": "few"}, "BLOOMFILTER_INITIAL_CAPACITY"),
        (
            {"BLOOMFILTER_CAPACITY": 10**9, "BLOOMFILTER_INITIAL_CAPACITY": 10**9},
            "BLOOMFILTER_INITIAL_CAPACITY",
        ),
        ({"BLOOMFILTER_CAPACITY": 10**15, "BLOOMFILTER_INITIAL_CAPACITY": 1}, "CAPACITY"),
    ],
)
def test_bad_settings_give_one_line_errors_naming_them(settings: dict, named: str) -> None:
    with pytest.raises(BloomConfigError) as info:
        layout_from_settings(Settings(settings), "book")
    message = str(info.value)
    assert named in message
    assert "\n" not in message


def test_bit_above_32_without_blocks_names_both_settings() -> None:
    with pytest.raises(BloomConfigError, match=r"BLOOMFILTER_BIT=33 .* BLOOMFILTER_BLOCKS"):
        BloomLayout("k", 1000, 0.01, bit=33, blocks=1)


def test_from_meta_rejects_garbage() -> None:
    layout = BloomLayout("k", 1000, 0.01, blocks=2)
    again = BloomLayout.from_meta("k", layout.meta())
    assert (again.bits, again.hashes, again.blocks) == (layout.bits, layout.hashes, 2)
    for broken in ({}, {**layout.meta(), "bits": "x"}, {**layout.meta(), "scheme": "other"}):
        with pytest.raises(BloomConfigError, match="k:meta"):
            BloomLayout.from_meta("k", broken)


@pytest.mark.parametrize(
    ("capacity", "error_rate", "initial"),
    [
        (100_000_000, 0.001, 1_000_000),
        (10**6, 0.01, 1000),
        (5000, 0.2, 5000),
        (10**9, 1e-6, 10**6),
    ],
)
def test_scalable_layers_grow_fourfold_and_keep_the_error_rate(
    capacity: int, error_rate: float, initial: int
) -> None:
    layout = ScalableLayout("k", capacity, error_rate, initial_capacity=initial)
    k0 = layout.first_hashes
    # layer i has k0 + i hashes and is full at half its bits set: rate 2^-(k0+i)
    assert 2.0 ** -(k0 - 1) <= error_rate < 2.0 ** -(k0 - 2)
    assert layout.layer_hashes == [k0 + i for i in range(len(layout.layer_bits))]
    assert layout.layer_capacity[0] == initial
    for i, bits in enumerate(layout.layer_bits[:-1]):
        assert bits == min(layout.layer_bits[0] * 4**i, MAX_BLOCK_BITS - HEADER_BITS)
    assert layout.layer_bits[-1] <= MAX_BLOCK_BITS - HEADER_BITS
    # the layers hold the capacity, the last one only what is left of it
    assert sum(layout.layer_capacity) >= capacity > sum(layout.layer_capacity[:-1])
    rates = [
        expected_error_rate(m, k, n)
        for m, k, n in zip(
            layout.layer_bits, layout.layer_hashes, layout.layer_capacity, strict=True
        )
    ]
    assert all(rate <= 2.0**-k * 1.001 for rate, k in zip(rates, layout.layer_hashes, strict=True))
    assert 1 - math.prod(1 - rate for rate in rates) <= error_rate


def test_the_default_scalable_filter_starts_at_two_megabytes() -> None:
    layout = ScalableLayout("book:bloomfilter")
    assert layout.layer_bits[0] == math.ceil(1_000_000 * 11 / math.log(2))  # 1.9 MiB
    assert len(layout.layer_bits) == 5
    # at full capacity: 242 MiB against the fixed filter's 171 MiB
    assert sum(layout.layer_bits) / 8 / 2**20 == pytest.approx(242.1, abs=0.1)


def test_scalable_layers_share_the_keys_slot() -> None:
    plain = ScalableLayout("book:bloomfilter", 10**6, 0.01, initial_capacity=1000)
    assert plain.layer_keys[:3] == ["book:bloomfilter", "book:bloomfilter:1", "book:bloomfilter:2"]
    tagged = ScalableLayout("{book}:bloomfilter", 10**6, 0.01, initial_capacity=1000)
    assert {key_slot(k.encode()) for k in tagged.layer_keys} == {key_slot(b"book")}
    assert tagged.script_item(b"x" * 20)[0] == tagged.layer_keys[0] == "{book}:bloomfilter"


def test_scalable_offsets_are_double_hashing_of_the_fingerprint_bytes() -> None:
    layout = ScalableLayout("k", 10**6, 0.01, initial_capacity=1000)
    fp = hashlib.sha1(b"https://example.com/").digest()
    h1, h2 = int.from_bytes(fp[0:4], "big"), int.from_bytes(fp[8:12], "big")
    key, arg = layout.script_item(fp)
    assert key == "k" and len(arg) == 18 and len(arg) % 4  # a fixed filter's args are 4k
    for layer, offsets in enumerate(layout.offsets(fp)):
        m, k = layout.layer_bits[layer], layout.first_hashes + layer
        assert offsets == [
            HEADER_BITS + (h1 + i * (h2 % m or 1) + (i**3 - i) // 6) % m for i in range(k)
        ]


def test_scalable_from_meta_round_trips_and_rejects_garbage() -> None:
    layout = ScalableLayout("k", 10**6, 0.01, initial_capacity=1000)
    again = ScalableLayout.from_meta("k", layout.meta())
    assert (again.layer_bits, again.layer_hashes) == (layout.layer_bits, layout.layer_hashes)
    for broken in (
        {},
        {**layout.meta(), "layer_bits": "1,2"},
        {**layout.meta(), "capacity": "many"},
        {**layout.meta(), "scheme": "edh-v1"},
    ):
        with pytest.raises(BloomConfigError, match="k:meta"):
            ScalableLayout.from_meta("k", broken)
