"""Items on the hub: a pipeline that appends every item to the Redis stream ``<spider>:items``.

Items are buffered and written with one pipelined ``XADD`` per batch (``ITEMS_BATCH_SIZE``), or
after at most ``ITEMS_FLUSH_INTERVAL`` seconds. ``process_item`` returns only once its item is
in Redis: the engine holds the request until then, so the frontier acknowledges a page only
after its items are stored, and a killed worker loses no item (at-least-once). Each entry has
the fields ``id`` (the item's ``ITEMS_ID_FIELD``, for de-duplication by ``crawlfleet export``)
and ``item`` (the item as JSON). A failed write keeps the batch and tries again later; when the
hub's Redis refuses some of a batch at ``maxmemory`` (``OOM``) only those are kept, and the full
hub is logged once per episode (``crawlfleet.hub.fullhub``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Self

import redis
from itemadapter import ItemAdapter
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.statscollectors import StatsCollector

from crawlfleet.hub.connect import redis_from_settings
from crawlfleet.hub.fullhub import FullHub, is_full
from crawlfleet.hub.keys import ITEMS_KEY
from crawlfleet.hub.urls import is_cluster_url, mask_url
from crawlfleet.settingtable import default

log = logging.getLogger(__name__)


def encode_item(item: Any, id_field: str) -> dict[str, str]:
    data = ItemAdapter(item).asdict()
    return {
        "id": str(data.get(id_field) or ""),
        "item": json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str),
    }


class RedisItemsPipeline:
    def __init__(self, crawler: Crawler) -> None:
        s = crawler.settings
        url = s.get("REDIS_URL")
        if not url:
            raise NotConfigured("REDIS_URL is not set")
        self.crawler = crawler
        assert crawler.stats is not None
        self.stats: StatsCollector = crawler.stats
        # The frontier's client: one connection pool per process, with its socket timeouts.
        self.redis = redis_from_settings(s, check=False)
        self.key_template = s.get(ITEMS_KEY.setting) or default(ITEMS_KEY.setting)
        self.id_field = s.get("ITEMS_ID_FIELD") or default("ITEMS_ID_FIELD")
        self.batch_size = s.getint("ITEMS_BATCH_SIZE", default("ITEMS_BATCH_SIZE"))
        self.flush_interval = s.getfloat("ITEMS_FLUSH_INTERVAL", default("ITEMS_FLUSH_INTERVAL"))
        self.maxlen = s.getint("ITEMS_MAXLEN", default("ITEMS_MAXLEN"))
        if self.batch_size < 1:
            raise ValueError(f"ITEMS_BATCH_SIZE must be >= 1, got {self.batch_size}")
        if self.flush_interval <= 0:
            raise ValueError(f"ITEMS_FLUSH_INTERVAL must be > 0, got {self.flush_interval}")
        self.key = ""
        self.buffer: list[dict[str, str]] = []
        self._waiters: list[asyncio.Future[None]] = []  # one per buffered item
        self._ticker: asyncio.Task[None] | None = None
        self.full = FullHub(log, "Items pipeline")
        self.where = mask_url(url)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    async def open_spider(self) -> None:
        assert self.crawler.spider is not None
        # tagged {<spider>} on a Redis Cluster, in the crawl's slot
        tagged = is_cluster_url(str(self.crawler.settings.get("REDIS_URL")))
        spider = self.crawler.spider.name
        self.key = ITEMS_KEY.resolve(self.key_template, spider, ValueError, tagged=tagged)
        self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        delay = self.flush_interval
        while True:
            await asyncio.sleep(delay)
            try:
                failed = bool(self.buffer) and not self.flush()
            except Exception:
                # Items wait on this loop: it must outlive any surprise (logged, retried).
                log.exception("writing items to %s failed", self.key)
                failed = True
            # While Redis is down, try less often (up to every 5 s).
            delay = min(5.0, delay * 2) if failed else self.flush_interval

    async def process_item(self, item: Any) -> Any:
        stored = asyncio.get_running_loop().create_future()
        self.buffer.append(encode_item(item, self.id_field))
        self._waiters.append(stored)
        # a full hub is retried by the ticker, not by every new item
        if len(self.buffer) >= self.batch_size and not self.full.waiting():
            with contextlib.suppress(Exception):
                self.flush()  # a failure reaches every item of the batch through its future
        await stored
        return item

    def flush(self) -> bool:
        """Write the buffer in one round trip; on a Redis error keep it for the next attempt."""
        batch, self.buffer = self.buffer, []
        waiters, self._waiters = self._waiters, []
        try:
            pipe = self.redis.pipeline(transaction=False)
            for fields in batch:
                if self.maxlen:
                    pipe.xadd(self.key, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
                else:
                    pipe.xadd(self.key, fields)  # type: ignore[arg-type]
            # errors in place: at maxmemory Redis may take the first XADDs and refuse the rest
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            self.buffer = batch + self.buffer
            self._waiters = waiters + self._waiters
            self.stats.inc_value("items/redis/error")
            log.warning("cannot write %d items to %s: %s; will retry", len(batch), self.key, exc)
            return False
        except Exception as exc:
            # Not a Redis outage: retrying will not help. Fail these items loudly (Scrapy logs
            # each) rather than leave their pages waiting for ever.
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            raise
        refused = [i for i, reply in enumerate(replies) if isinstance(reply, Exception)]
        errors = [replies[i] for i in refused]
        kept = set(refused)
        written = len(batch) - len(refused)
        if written:
            self.stats.inc_value("items/redis/written", written)
            self.stats.inc_value("items/redis/batches")
        for i, waiter in enumerate(waiters):
            if i not in kept and not waiter.done():
                waiter.set_result(None)
        if not errors:
            self.full.accepted()
            return True
        self.buffer = [batch[i] for i in refused] + self.buffer
        self._waiters = [waiters[i] for i in refused] + self._waiters
        self.stats.inc_value("items/redis/error")
        if all(is_full(exc) for exc in errors):
            self.stats.inc_value("items/redis/refused_full", len(refused))
            self.full.refused(
                f"XADD to {self.key}", f"keeping {len(self.buffer)} item(s)", self.where
            )
        else:
            log.warning(
                "cannot write %d items to %s: %s; will retry", len(refused), self.key, errors[0]
            )
        return False

    async def close_spider(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for _ in range(5):
            if not self.buffer or self.flush():
                break
            await asyncio.sleep(1.0)
        if self.buffer:
            log.error("%d items could not be written to %s", len(self.buffer), self.key)
