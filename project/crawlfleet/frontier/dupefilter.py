"""Duplicate filters kept in Redis, shared by every worker of a crawl.

A frontier dupefilter can be used two ways:

* on its own, through Scrapy's ``request_seen()`` (one atomic round trip per request), and
* inside the scheduler's enqueue script, so that "is it new? then push it" is one atomic round
  trip. For that the filter contributes a Lua function and, per request, the key and argument
  that function needs (see :class:`RedisDupeFilter`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import redis
from scrapy import Request, Spider
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.request import RequestFingerprinterProtocol, referer_str

from crawlfleet.frontier.bloom import LUA_CHECK_AND_ADD as BLOOM_CHECK_AND_ADD
from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import Layout, layout_from_settings
from crawlfleet.frontier.config import FrontierConfigError
from crawlfleet.hub.connect import redis_from_settings, redis_url
from crawlfleet.hub.keys import DUPEFILTER_KEY
from crawlfleet.hub.urls import is_cluster_url

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)


class RedisDupeFilter(BaseDupeFilter, ABC):
    """Contract between a Redis dupefilter and the frontier scheduler.

    ``LUA_CHECK_AND_ADD`` is Lua source that defines ``local function check_and_add(key, arg)``
    returning 1 when the fingerprint was new (and is now recorded) and 0 when it was seen before.
    The scheduler pastes it into its enqueue script and calls it with ``script_item(request)``.

    Besides the two abstract methods, subclasses get (and may override):
    ``request_seen(request)`` — the same Lua function run alone, one atomic round trip;
    ``log(request, spider)`` — Scrapy-style ``DUPEFILTER_DEBUG`` logging and the
    ``dupefilter/filtered`` stat, called by the scheduler for every filtered request.
    Subclasses set ``self.client`` (the process-wide client from
    ``crawlfleet.frontier.config.redis_from_settings``), ``self.debug`` and ``self.stats``.
    """

    LUA_CHECK_AND_ADD: str
    client: redis.Redis
    key: str
    debug: bool = False
    stats: StatsCollector | None = None
    _logdupes: bool = True
    _seen_script: Any = None

    @abstractmethod
    def script_item(self, request: Request) -> tuple[str, bytes]:
        """The (key, argument) pair that ``check_and_add`` receives for ``request``."""

    @abstractmethod
    def clear(self) -> None:
        """Forget every fingerprint (``SCHEDULER_FLUSH_ON_START``); never called on close."""

    def request_seen(self, request: Request) -> bool:
        if self._seen_script is None:
            self._seen_script = self.client.register_script(
                self.LUA_CHECK_AND_ADD + "\nreturn check_and_add(KEYS[1], ARGV[1])"
            )
        key, arg = self.script_item(request)
        return int(self._seen_script(keys=[key], args=[arg])) == 0

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": request, "referer": referer_str(request)},
                extra={"spider": spider},
            )
        elif self._logdupes:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
                extra={"spider": spider},
            )
            self._logdupes = False
        if self.stats is not None:
            self.stats.inc_value("dupefilter/filtered")


class SetDupeFilter(RedisDupeFilter):
    """A Redis set of hex request fingerprints, like scrapy-redis's ``RFPDupeFilter``.

    Key: ``SCHEDULER_DUPEFILTER_KEY`` (default ``<spider>:dupefilter``); fingerprints come from
    Scrapy's ``REQUEST_FINGERPRINTER_CLASS`` (``crawler.request_fingerprinter``).
    """

    LUA_CHECK_AND_ADD = (
        "local function check_and_add(key, arg) return redis.call('SADD', key, arg) end"
    )

    def __init__(
        self,
        client: redis.Redis,
        key: str,
        fingerprinter: RequestFingerprinterProtocol,
        debug: bool = False,
        stats: StatsCollector | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.fingerprinter = fingerprinter
        self.debug = debug
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler, shard: int = 0, shards: int = 1) -> SetDupeFilter:
        """The crawl's filter (``shard`` of ``shards``: that shard's, see SCHEDULER_SHARDS)."""
        spider = crawler.spider.name if crawler.spider else getattr(crawler.spidercls, "name", "")
        template = crawler.settings.get(DUPEFILTER_KEY.setting)
        tagged = is_cluster_url(redis_url(crawler.settings))
        key = DUPEFILTER_KEY.resolve(
            template, spider, FrontierConfigError, tagged=tagged, shard=shard, shards=shards
        )
        client = redis_from_settings(crawler.settings)
        found = client.type(key)
        if found not in (b"none", b"set", "none", "set"):
            raise FrontierConfigError(
                f"SCHEDULER_DUPEFILTER_KEY {key!r} holds a Redis "
                f"{found.decode() if isinstance(found, bytes) else found}, not a set"
            )
        assert crawler.request_fingerprinter is not None
        return cls(
            client,
            key,
            crawler.request_fingerprinter,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            stats=crawler.stats,
        )

    def script_item(self, request: Request) -> tuple[str, bytes]:
        return self.key, self.fingerprinter.fingerprint(request).hex().encode()

    def clear(self) -> None:
        self.client.delete(self.key)


class BloomDupeFilter(RedisDupeFilter):
    """A Bloom filter of request fingerprints in Redis (:mod:`crawlfleet.frontier.bloom`).

    Key ``BLOOMFILTER_KEY`` (default ``<spider>:bloomfilter``), sized by
    ``BLOOMFILTER_CAPACITY`` and ``BLOOMFILTER_ERROR_RATE`` (or scrapy-redis-bloomfilter's
    ``BLOOMFILTER_BIT`` and ``BLOOMFILTER_HASH_NUMBER``). A filtered request counts in
    ``bloomfilter/filtered`` (scrapy-redis-bloomfilter's stat) and ``dupefilter/filtered``.
    Settings are checked when built; the keys in Redis when opened (after a
    ``SCHEDULER_FLUSH_ON_START`` flush, so a flush can replace a filter sized differently).
    """

    LUA_CHECK_AND_ADD = BLOOM_CHECK_AND_ADD

    def __init__(
        self,
        client: redis.Redis,
        layout: Layout,
        fingerprinter: RequestFingerprinterProtocol,
        debug: bool = False,
        stats: StatsCollector | None = None,
    ) -> None:
        self.client = client
        self.layout = layout
        self.key = layout.key
        self.fingerprinter = fingerprinter
        self.debug = debug
        self.stats = stats
        self._bloom: BloomFilter | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler, shard: int = 0, shards: int = 1) -> BloomDupeFilter:
        """The crawl's filter (``shard`` of ``shards``: that shard's, see SCHEDULER_SHARDS)."""
        spider = crawler.spider.name if crawler.spider else getattr(crawler.spidercls, "name", "")
        layout = layout_from_settings(crawler.settings, spider, shard, shards)
        assert crawler.request_fingerprinter is not None
        return cls(
            redis_from_settings(crawler.settings),
            layout,
            crawler.request_fingerprinter,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            stats=crawler.stats,
        )

    @property
    def bloom(self) -> BloomFilter:
        """The filter in Redis, checked and recorded on first use."""
        if self._bloom is None:
            self._bloom = BloomFilter(self.client, self.key, layout=self.layout)
        return self._bloom

    def open(self) -> None:
        self.bloom  # noqa: B018 - fail at start-up, not at the first request

    def script_item(self, request: Request) -> tuple[str, bytes]:
        return self.bloom.script_item(self.fingerprinter.fingerprint(request))

    def clear(self) -> None:
        BloomFilter.destroy(self.client, self.layout)
        self._bloom = None

    def log(self, request: Request, spider: Spider) -> None:
        super().log(request, spider)
        if self.stats is not None:
            self.stats.inc_value("bloomfilter/filtered")
