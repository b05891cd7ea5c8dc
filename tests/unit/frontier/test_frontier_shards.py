"""A crawl split into shards (SCHEDULER_SHARDS), without servers: the shards' key prefixes, a
site's shard, the shard record read back, and the settings' one-line errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot
from scrapy.settings import Settings

from crawlfleet.frontier.bloomlayout import BloomConfigError, layout_from_settings
from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.frontier.shards import shard_names, shard_of
from crawlfleet.hub.keys import MAX_SHARDS, QUEUE_KEY, SLOTS, SpiderKeys, shard_name

SPIDERS = ["book", "site", "a", "x" * 80, "my:spider", "crawl-2026.12", "ü"]


def slot_range(keys: SpiderKeys, shards: int) -> int:
    return key_slot(keys.requests.encode()) * shards // SLOTS


@pytest.mark.parametrize("spider", SPIDERS)
@pytest.mark.parametrize("shards", [2, 3, 4, 6, 16])
def test_shards_land_in_different_slot_ranges(spider: str, shards: int) -> None:
    tagged = SpiderKeys(spider, tagged=True).of_shards(shards)
    # shard 0 is the crawl's own prefix: an unsharded crawl's keys, byte for byte
    assert tagged[0] == SpiderKeys(spider, tagged=True)
    assert tagged[0].prefix == "{" + spider + "}"
    # each shard in a slot range of its own: on a cluster of `shards` primaries holding equal
    # ranges (redis-cli --cluster create), one shard per primary
    assert sorted(slot_range(k, shards) for k in tagged) == list(range(shards))
    for k in tagged:  # every key of a shard in the shard's one slot
        assert {key_slot(n.encode()) for n in (k.requests, k.leases("w"), k.stats, k.seq)} == {
            key_slot(k.prefix.encode())
        }
    plain = SpiderKeys(spider).of_shards(shards)
    assert [k.prefix for k in plain] == [k.prefix[1:-1] for k in tagged]
    assert len({k.prefix for k in plain}) == shards


def test_shard_names_are_deterministic_and_documented() -> None:
    # every worker and operator tool computes the same names: a change here strands crawls
    assert [k.prefix for k in SpiderKeys("site").of_shards(3)] == ["site", "site~2", "site~1"]
    assert [k.requests for k in SpiderKeys("book", tagged=True).of_shards(3)] == [
        "{book}:requests",
        "{book~3}:requests",
        "{book~2}:requests",
    ]
    assert SpiderKeys("book").shard_count == "book:shards"
    assert shard_name("book", 0, 1) == "book"
    with pytest.raises(ValueError, match="at most"):
        shard_name("book", 0, MAX_SHARDS + 1)


@given(site=st.text(), shards=st.integers(1, MAX_SHARDS))
@settings(max_examples=300)
def test_a_sites_shard_is_stable_and_in_range(site: str, shards: int) -> None:
    # any string may be a politeness key (surrogates, NULs, '{', '}' …)
    k = shard_of(site, shards)
    assert 0 <= k < shards
    assert shard_of(site, shards) == k
    if shards == 1:
        assert k == 0


def test_sites_spread_over_the_shards() -> None:
    counts = [0, 0, 0]
    for i in range(3000):
        counts[shard_of(f"host{i}.example", 3)] += 1
    assert min(counts) > 800, counts
    # pinned: the hash is the same in every process and Python version
    assert [shard_of(f"127.0.0.{i}", 3) for i in range(2, 10)] == [0, 1, 2, 2, 1, 2, 1, 2]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (0, r"^SCHEDULER_SHARDS must be a whole number > 0, got 0$"),
        (-2, r"^SCHEDULER_SHARDS must be a whole number > 0, got -2$"),
        ("two", r"^SCHEDULER_SHARDS must be an integer, got 'two'$"),
        (2.5, r"^SCHEDULER_SHARDS must be a whole number > 0, got 2.5$"),
        (MAX_SHARDS + 1, rf"^SCHEDULER_SHARDS must be at most {MAX_SHARDS}, got {MAX_SHARDS + 1}$"),
    ],
)
def test_bad_shard_counts_are_one_line_errors(raw: object, message: str) -> None:
    with pytest.raises(FrontierConfigError, match=message):
        FrontierConfig.from_settings(Settings({"SCHEDULER_SHARDS": raw}), "book")


def test_shard_keys_follow_the_key_settings() -> None:
    one = FrontierConfig.from_settings(Settings(), "book")
    assert (one.shards, one.shard_queue_keys) == (1, ("book:requests",))
    config = FrontierConfig.from_settings(
        Settings({"SCHEDULER_SHARDS": "3", "SCHEDULER_QUEUE_KEY": "q:%(spider)s"}), "book"
    )
    assert config.shards == 3
    assert config.shard_queue_keys == ("q:book", "q:book~3", "q:book~2")
    assert config.queue_key == "q:book"  # the home shard's names are the unsharded ones
    assert config.shard_start_urls_keys[1:] == ("book~3:start_urls", "book~2:start_urls")
    cluster = FrontierConfig.from_settings(
        Settings({"SCHEDULER_SHARDS": 3, "REDIS_URL": "redis+cluster://127.0.0.1:7000/0"}), "book"
    )
    assert cluster.shard_queue_keys == ("{book}:requests", "{book~3}:requests", "{book~2}:requests")
    assert [k.prefix for k in cluster.shard_keys] == ["{book}", "{book~3}", "{book~2}"]


@pytest.mark.parametrize("shards", [1, 3])
def test_a_spider_named_like_a_shard_is_refused(shards: int) -> None:
    # "book~3" is shard 1's name of the sharded crawl "book": its keys would be that shard's
    with pytest.raises(FrontierConfigError, match=r"^spider name 'book~3' contains '~', "):
        FrontierConfig.from_settings(Settings({"SCHEDULER_SHARDS": shards}), "book~3")


def test_a_key_template_the_shards_would_share_is_refused() -> None:
    with pytest.raises(FrontierConfigError, match=r"^SCHEDULER_QUEUE_KEY 'queue' names 'queue' "):
        FrontierConfig.from_settings(
            Settings({"SCHEDULER_SHARDS": 2, "SCHEDULER_QUEUE_KEY": "queue"}), "book"
        )
    # alone, the same template is fine (as before)
    FrontierConfig.from_settings(Settings({"SCHEDULER_QUEUE_KEY": "queue"}), "book")
    with pytest.raises(BloomConfigError, match=r"^BLOOMFILTER_KEY 'bf' names 'bf' for every"):
        layout_from_settings(Settings({"BLOOMFILTER_KEY": "bf"}), "book", 1, 2)
    assert layout_from_settings(Settings(), "book", 1, 2).key == "book~2:bloomfilter"
    assert QUEUE_KEY.resolve(None, "book", ValueError, shard=2, shards=3) == "book~2:requests"


def test_operator_tools_find_every_shard() -> None:
    home = SpiderKeys("book")
    frontier = {"queue_key": "q:book", "dupefilter_class": "x.SetDupeFilter"}
    assert [(s.queue_key, s.dupefilter_key) for s in shard_names(home, None, frontier)] == [
        ("q:book", "book:dupefilter")
    ]
    frontier["shard_queue_keys"] = json.dumps(["q:book", "q:book~3", "q:book~2"])
    found = shard_names(home, b"3", frontier)
    assert [s.keys.prefix for s in found] == ["book", "book~3", "book~2"]
    assert [s.queue_key for s in found] == ["q:book", "q:book~3", "q:book~2"]
    assert found[2].dupefilter_key == "book~2:dupefilter"
    # a record that is no count (another type's error, junk) reads as one shard
    for junk in (b"x", b"0", b"100000", Exception("WRONGTYPE")):
        assert len(shard_names(home, junk, {})) == 1
