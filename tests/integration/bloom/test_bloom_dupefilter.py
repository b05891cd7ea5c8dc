"""BloomDupeFilter built the way Scrapy builds it, and the book's crawl with both schedulers."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler
from support.sites import QuietHandler, serve_http, url_of

from crawlfleet.frontier.bloomlayout import BloomConfigError
from crawlfleet.frontier.dupefilter import BloomDupeFilter, RedisDupeFilter
from crawlfleet.hub.errors import RedisConfigError

CRAWL_SCRIPT = Path(__file__).with_name("bloom_crawl.py")
ROOT = Path(__file__).resolve().parents[3]
DUPEFILTER_LOGGER = "crawlfleet.frontier.dupefilter"


class BookSpider(Spider):
    name = "book"


def build(redis_url: str, **settings: object) -> BloomDupeFilter:
    crawler = get_crawler(
        BookSpider,
        {"REDIS_URL": redis_url, "BLOOMFILTER_CAPACITY": 10_000, **settings},
    )
    df = BloomDupeFilter.from_crawler(crawler)
    df.open()
    return df


def test_request_seen_and_stats(redis_url: str, redis_client: redis.Redis) -> None:
    df = build(redis_url)
    assert isinstance(df, RedisDupeFilter)
    spider = BookSpider()
    spider.crawler = get_crawler(BookSpider)
    first, again = Request("https://example.org/a"), Request("https://example.org/a")
    assert df.request_seen(first) is False
    assert df.request_seen(again) is True
    assert df.request_seen(Request("https://example.org/b")) is False
    df.log(again, spider)
    df.log(again, spider)
    assert df.stats is not None
    assert df.stats.get_value("bloomfilter/filtered") == 2
    assert df.stats.get_value("dupefilter/filtered") == 2
    assert redis_client.exists("book:bloomfilter", "book:bloomfilter:meta") == 2
    # a scalable filter by default: one key until its first layer is full
    assert redis_client.hget("book:bloomfilter:meta", "scheme") == b"sbf-v1"
    key, arg = df.script_item(first)
    assert key == "book:bloomfilter"
    assert len(arg) == 18


def test_a_fixed_filter_from_before_keeps_working(redis_url: str) -> None:
    # made while fixed filters were the default (the capacity then gave 95,851 bits, k = 7)
    old = build(redis_url, BLOOMFILTER_SCALABLE=False, BLOOMFILTER_ERROR_RATE=0.01)
    assert old.request_seen(Request("https://example.org/a")) is False
    df = build(redis_url, BLOOMFILTER_ERROR_RATE=0.01)
    assert (df.bloom.bits, df.bloom.hashes) == (old.bloom.bits, old.bloom.hashes) == (95_851, 7)
    assert df.request_seen(Request("https://example.org/a")) is True
    # What SCHEDULER_FLUSH_ON_START does: clear, then open; the new filter is scalable.
    df.clear()
    df.open()
    assert df.request_seen(Request("https://example.org/a")) is False
    assert df.bloom.info()["max_layers"] == 1  # 10,000 fingerprints fit the first layer


def test_debug_logging_like_scrapy(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    spider = BookSpider()
    quiet, loud = build(redis_url), build(redis_url, DUPEFILTER_DEBUG=True)
    request = Request("https://example.org/a", headers={"Referer": "https://example.org/"})
    with caplog.at_level(logging.DEBUG, logger=DUPEFILTER_LOGGER):
        quiet.log(request, spider)
        quiet.log(request, spider)
    # only the dupefilter's records: after tests that lowered the root logger's level, Scrapy's
    # INFO lines from building the two crawlers are captured too
    [message] = [r.getMessage() for r in caplog.records if r.name == DUPEFILTER_LOGGER]
    assert "no more duplicates will be shown" in message
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=DUPEFILTER_LOGGER):
        loud.log(request, spider)
        loud.log(request, spider)
    messages = [r.getMessage() for r in caplog.records if r.name == DUPEFILTER_LOGGER]
    assert len(messages) == 2
    assert "(referer: https://example.org/)" in messages[0]


def test_clear_replaces_a_filter_sized_differently(redis_url: str) -> None:
    df = build(redis_url, BLOOMFILTER_CAPACITY=1000)
    assert df.request_seen(Request("https://example.org/a")) is False
    resized = BloomDupeFilter.from_crawler(
        get_crawler(BookSpider, {"REDIS_URL": redis_url, "BLOOMFILTER_CAPACITY": 5000})
    )
    with pytest.raises(BloomConfigError, match="BLOOMFILTER_CAPACITY"):
        resized.open()
    # What SCHEDULER_FLUSH_ON_START does: clear, then open.
    resized.clear()
    resized.open()
    assert resized.request_seen(Request("https://example.org/a")) is False
    assert resized.bloom.capacity == 5000


def test_compatibility_settings(redis_url: str, redis_client: redis.Redis) -> None:
    df = build(redis_url, BLOOMFILTER_BIT=20, BLOOMFILTER_HASH_NUMBER=6)
    assert (df.bloom.bits, df.bloom.hashes) == (1 << 20, 6)
    assert redis_client.hget("book:bloomfilter:meta", "bits") == str(1 << 20).encode()


def test_key_template(redis_url: str, redis_client: redis.Redis) -> None:
    df = build(redis_url, BLOOMFILTER_KEY="bf:%(spider)s")
    df.request_seen(Request("https://example.org/a"))
    assert redis_client.exists("bf:book") == 1


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"BLOOMFILTER_ERROR_RATE": 0}, "BLOOMFILTER_ERROR_RATE"),
        ({"BLOOMFILTER_ERROR_RATE": "1.0"}, "BLOOMFILTER_ERROR_RATE"),
        ({"BLOOMFILTER_CAPACITY": 0}, "BLOOMFILTER_CAPACITY"),
        ({"BLOOMFILTER_BIT": 33, "BLOOMFILTER_BLOCKS": 1}, "BLOOMFILTER_BIT"),
        ({"BLOOMFILTER_KEY": "%(x)s"}, "BLOOMFILTER_KEY"),
    ],
)
def test_bad_settings(redis_url: str, settings: dict[str, object], named: str) -> None:
    with pytest.raises(BloomConfigError, match=named) as info:
        build(redis_url, **settings)
    assert "\n" not in str(info.value)


def test_key_of_another_type(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.hset("book:bloomfilter", "a", "b")
    with pytest.raises(BloomConfigError, match="'book:bloomfilter' holds a hash"):
        build(redis_url)
    assert redis_client.hgetall("book:bloomfilter") == {b"a": b"b"}


def test_wrong_password_names_the_url(own_redis) -> None:
    own_redis.client().config_set("requirepass", "right")
    url = own_redis.url.replace("redis://", "redis://:wrong@")
    with pytest.raises(RedisConfigError, match=r"redis://:\*\*\*@127\.0\.0\.1") as info:
        build(url)
    assert "wrong" not in str(info.value)


# -- the book's crawl ---------------------------------------------------------------------------


@pytest.fixture
def site() -> Iterator[str]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, b"<html><body>a page</body></html>")

    with serve_http(Handler) as server:
        yield url_of(server)


def crawl(site: str, tmp_path: Path, settings: dict[str, object]) -> dict:
    result = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "project")}
    proc = subprocess.run(
        [sys.executable, str(CRAWL_SCRIPT), site, str(result), json.dumps(settings)],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return dict(json.loads(result.read_text()))


BASE = {
    "DUPEFILTER_CLASS": "crawlfleet.frontier.dupefilter.BloomDupeFilter",
    "BLOOMFILTER_CAPACITY": 100_000,
    "BLOOMFILTER_ERROR_RATE": 0.001,
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
    "ROBOTSTXT_OBEY": False,
}


def test_book_crawl_with_scrapys_scheduler(
    site: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    summary = crawl(site, tmp_path, {**BASE, "REDIS_URL": redis_url})
    assert summary["reason"] == "finished"
    assert summary["parsed"] == 100
    assert summary["stats"]["bloomfilter/filtered"] == 10
    assert summary["stats"]["dupefilter/filtered"] == 10
    assert redis_client.exists("bloomtest:bloomfilter") == 1


def test_book_crawl_with_the_frontier_scheduler(
    site: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    settings = {
        **BASE,
        "REDIS_URL": redis_url,
        "SCHEDULER": "crawlfleet.frontier.scheduler.Scheduler",
        "SCHEDULER_LEASE_TIMEOUT": 3,
        "SCHEDULER_HEARTBEAT_INTERVAL": 0.5,
        "POLITENESS_ENABLED": False,
    }
    summary = crawl(site, tmp_path, settings)
    assert summary["reason"] == "finished"
    assert summary["parsed"] == 100
    assert summary["stats"]["bloomfilter/filtered"] == 10
    assert redis_client.exists("bloomtest:bloomfilter") == 1
