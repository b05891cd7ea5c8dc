"""Push a worker's throughput samples and Scrapy stats to the hub (status, dashboard, metrics).

Enable on every worker::

    EXTENSIONS = {"crawlfleet.extensions.workerstats.WorkerStats": 500}

Every ``WORKERSTATS_INTERVAL`` seconds (and once when the spider closes) one Lua call on the
frontier's Redis appends ``"<ms> <pages> <items>"`` (Redis server time, Scrapy's
``response_received_count`` and ``item_scraped_count``) to ``<spider>:ops:series:<worker>``,
capped to ``WORKERSTATS_HISTORY`` seconds of samples, records the worker in
``<spider>:ops:workers`` and replaces ``<spider>:ops:scrapy:<worker>`` with the numeric Scrapy
stats. The worker id is the frontier scheduler's, so these join the frontier's per-worker keys.
The project and release the worker runs (``CRAWLFLEET_PROJECT`` and
``CRAWLFLEET_PROJECT_VERSION`` of its environment, set by the crawler role) go into its frontier
record ``<spider>:worker:<worker>`` as ``project`` and ``version``, where ``crawlfleet status`` and
the dashboard read them.
A Redis failure is logged and skipped: statistics never stop a crawl (a full hub, refusing writes
at ``maxmemory``, is logged once per episode).
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Self

import redis
from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from twisted.internet.task import LoopingCall

from crawlfleet.hub.connect import redis_from_settings, redis_url
from crawlfleet.hub.fullhub import FullHub, is_full
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.lua import read_lua
from crawlfleet.hub.urls import mask_url
from crawlfleet.settingtable import default
from crawlfleet.settingtable.values import flag, seconds

logger = logging.getLogger(__name__)

# Seconds of samples each worker keeps in its history (WORKERSTATS_HISTORY's default): the window
# the readers (crawlfleet.views.crawl, the dashboard's series) show.
HISTORY: float = default("WORKERSTATS_HISTORY")
_ERROR_LOG_INTERVAL = 30.0

# KEYS: series, registry, scrapy stats, worker record. ARGV: worker, pages, items, cap, history ms,
# project, version, k1, v1, …
# Keys expire a day after the last write, like the frontier's per-worker keys.
_WRITE = read_lua("crawlfleet.extensions", "workerstats_write.lua")


def numeric_stats(stats: dict[str, Any]) -> list[str]:
    """Flat ``[name, value, …]`` of the int and float stats (datetimes and strings are left out)."""
    out: list[str] = []
    for name, value in sorted(stats.items()):
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        out.extend([name, repr(value) if isinstance(value, float) else str(value)])
    return out


class WorkerStats:
    """``EXTENSIONS = {"crawlfleet.extensions.workerstats.WorkerStats": 500}``."""

    def __init__(self, crawler: Crawler, client: redis.Redis, interval: float, history: float):
        self.crawler = crawler
        self.client = client
        self.interval = interval
        self.history = history
        # One sample per interval, plus one, covers the whole history.
        self.cap = math.ceil(history / interval) + 1
        self.script = client.register_script(_WRITE)
        self.worker = ""
        self.spider = ""
        self.loop: LoopingCall | None = None
        self._last_error_log = 0.0
        self._full = FullHub(logger, "WorkerStats")
        # What the crawler role's spider environment says this worker runs ("" by hand).
        self.project = os.environ.get("CRAWLFLEET_PROJECT", "")
        self.version = os.environ.get("CRAWLFLEET_PROJECT_VERSION", "")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not flag(crawler.settings, "WORKERSTATS_ENABLED", default("WORKERSTATS_ENABLED")):
            raise NotConfigured("WORKERSTATS_ENABLED is False")
        interval = seconds(
            crawler.settings, "WORKERSTATS_INTERVAL", default("WORKERSTATS_INTERVAL")
        )
        history = seconds(crawler.settings, "WORKERSTATS_HISTORY", default("WORKERSTATS_HISTORY"))
        client = redis_from_settings(crawler.settings, check=False)
        ext = cls(crawler, client, interval, history)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        scheduler = self.crawler.engine.scheduler if self.crawler.engine else None
        worker = getattr(scheduler, "worker", None)
        if not isinstance(worker, str) or not worker:
            logger.warning(
                "WorkerStats needs the frontier scheduler (crawlfleet.frontier.scheduler."
                "Scheduler) to name this worker; not sending statistics",
                extra={"spider": spider},
            )
            return
        self.worker, self.spider = worker, spider.name
        self.loop = LoopingCall(self.write)
        self.loop.start(self.interval, now=True)

    def spider_closed(self, spider: Spider) -> None:
        if self.loop is None:
            return
        if self.loop.running:
            self.loop.stop()
        self.write()

    def write(self) -> bool:
        """One round trip: append a sample, refresh the registry, replace the Scrapy stats, and
        stamp the worker record with the project and release."""
        assert self.crawler.stats is not None
        stats = self.crawler.stats.get_stats()
        names = SpiderKeys.for_url(self.spider, redis_url(self.crawler.settings))
        keys = [
            names.ops_series(self.worker),
            names.ops_workers,
            names.ops_scrapy(self.worker),
            names.worker(self.worker),
        ]
        args = [
            self.worker,
            str(int(stats.get("response_received_count", 0))),
            str(int(stats.get("item_scraped_count", 0))),
            str(self.cap),
            str(int(self.history * 1000)),
            self.project,
            self.version,
            *numeric_stats(stats),
        ]
        try:
            self.script(keys=keys, args=args)
        except redis.RedisError as exc:
            if is_full(exc):
                where = mask_url(str(self.crawler.settings.get("REDIS_URL") or ""))
                self._full.refused("statistics", "skipping samples", where)
                return False
            now = time.monotonic()
            if now - self._last_error_log >= _ERROR_LOG_INTERVAL:
                self._last_error_log = now
                logger.warning("WorkerStats: cannot write statistics to Redis (%s); skipped", exc)
            return False
        self._full.accepted()
        return True
