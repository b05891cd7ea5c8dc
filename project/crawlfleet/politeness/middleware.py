"""PolitenessMiddleware: every download holds a slot of its politeness key; responses adapt it.

Order 750: after the ProxyMiddleware (740, which chose the egress proxy) and the
AuthorizationMiddleware (745) on requests, and first on responses. A request the frontier
scheduler handed out already holds a slot of its key (``politeness_slot`` in its meta); any other
— robots.txt fetches, ``engine.download``, a spider on Scrapy's own scheduler, a request whose
proxy changed after the scheduler chose it — takes one here, waiting with an asyncio sleep (never
blocking the reactor). Each response is classified (``POLITENESS_BAN_STATUSES``,
``POLITENESS_BAN_MARKERS``, ``Retry-After``) and its outcome and response time recorded on the
key (a timeout counts as a response as slow as the timeout: the key learns from both); a ban page
that only a marker reveals (its status is not a ban status) is retried, never parsed; with
``ROBOTSTXT_OBEY`` a robots.txt's ``Crawl-delay`` caps the site for the whole crawl. While the
crawl runs, the objects alive at its start are frozen out of the garbage collector
(``POLITENESS_GC_FREEZE``): a slot is usable for one interval only, and full collections of them
stalled the reactor for longer. Stats: ``politeness/...`` in Scrapy's stats.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Self
from urllib.parse import urlsplit

import redis
from protego import Protego
from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest, NotConfigured
from scrapy.http import Response
from twisted.internet.error import TCPTimedOutError

from crawlfleet.politeness.pacer import META_KEY, META_SLOT, Pacer, pacer_for

logger = logging.getLogger(__name__)
# The exceptions of a download that took too long (Scrapy's, Twisted's and Python's).
TIMEOUTS = (DownloadTimeoutError, TCPTimedOutError, TimeoutError)


class PolitenessMiddleware:
    def __init__(self, crawler: Crawler, pacer: Pacer) -> None:
        assert crawler.stats is not None
        self.crawler = crawler
        self.pacer = pacer
        self.stats = crawler.stats
        settings = crawler.settings
        self.obey_robots = settings.getbool("ROBOTSTXT_OBEY")
        self.timeout = settings.getfloat("DOWNLOAD_TIMEOUT", 180.0)
        self.robots_agent = str(
            settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        )
        self._waiting: dict[str, int] = {}
        self._frozen = False
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        pacer = pacer_for(crawler)
        if pacer is None:
            raise NotConfigured("POLITENESS_ENABLED is False or REDIS_URL is not set")
        return cls(crawler, pacer)

    async def process_request(self, request: Request) -> None:
        key = self.pacer.key(request.url, request.meta.get("proxy") or None)
        request.meta[META_KEY] = key
        scheduled = META_SLOT in request.meta
        if self.pacer.holds_slot(request, key):
            self.stats.inc_value("politeness/slots/scheduler")
            return
        if scheduled:
            self.stats.inc_value("politeness/slots/stale")
        await self._slot(key)

    async def _slot(self, key: str) -> None:
        """Wait (asyncio) until this request holds a slot of ``key``."""
        budget = self.pacer.budget
        self._waiting[key] = self._waiting.get(key, 0) + 1
        started = time.monotonic()
        try:
            while (
                wait := budget.acquire(key, min(self._waiting[key], budget.config.lease_size))
            ) > 0:
                await asyncio.sleep(wait)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]
        self.stats.inc_value("politeness/slots/middleware")
        waited = time.monotonic() - started
        if waited > 0.001:
            self.stats.inc_value("politeness/wait/count")
            self.stats.inc_value("politeness/wait/ms", round(waited * 1000))

    def process_response(self, request: Request, response: Response) -> Request | Response:
        key = request.meta.get(META_KEY)
        if not key:
            return response
        outcome = self.pacer.record(
            key,
            response.status,
            response.body,
            response.headers.get("Retry-After"),
            request.meta.get("download_latency"),
        )
        self.stats.inc_value(
            "politeness/responses/banned" if outcome.ban else "politeness/responses/ok"
        )
        if outcome.ban:
            logger.debug(
                "politeness: ban signal %s from %s (key %s)", response.status, request.url, key
            )
            if response.status not in self.pacer.config.ban_statuses:
                return self._ban_page(request, response)
        if (
            self.obey_robots
            and response.status == 200
            and urlsplit(request.url).path == "/robots.txt"
        ):
            self._crawl_delay(self.pacer.budget.site_of(key), response)
        return response

    def _ban_page(self, request: Request, response: Response) -> Request:
        """A ban only a body marker reveals (a 200 "access denied" page): it is no answer, so the
        spider never sees it. The request is retried as RetryMiddleware would (``RETRY_TIMES``,
        ``dont_retry``, stats ``retry/…``; it takes a new slot, through another proxy when its
        pair rests); past its retries it is given up like any failed download (the frontier
        keeps it with the failed requests: ``crawlfleet requeue-failed``)."""
        self.stats.inc_value("politeness/responses/ban_page")
        spider = self.crawler.spider
        if spider is not None and not request.meta.get("dont_retry"):
            retry = get_retry_request(request, spider=spider, reason="politeness ban page")
            if retry is not None:
                return retry
        raise IgnoreRequest(f"a ban page (POLITENESS_BAN_MARKERS) from {request.url}")

    def process_exception(self, request: Request, exception: Exception) -> None:
        """A download that timed out counts as a response as slow as the timeout: a target that
        slows down before it bans is backed off (``POLITENESS_LATENCY_FACTOR``)."""
        key = request.meta.get(META_KEY)
        if key and isinstance(exception, TIMEOUTS):
            timeout = request.meta.get("download_timeout") or self.timeout
            self.pacer.budget.record_latency(key, float(timeout))
            self.stats.inc_value("politeness/responses/timeout")

    def _crawl_delay(self, site: str, response: Response) -> None:
        robots = Protego.parse(response.body.decode("utf-8", "replace"))
        delay = robots.crawl_delay(self.robots_agent)
        try:
            self.pacer.set_crawl_delay(site, float(delay) if delay else None)
        except redis.RedisError as exc:
            logger.warning("politeness: cannot store %s's Crawl-delay on the hub (%s)", site, exc)
            return
        if delay:
            self.stats.set_value(f"politeness/crawl_delay/{site}", float(delay))
            logger.info(
                "politeness: %s asks for Crawl-delay %ss; the crawl keeps to it", site, delay
            )

    def spider_opened(self) -> None:
        if self.pacer.config.gc_freeze and not self._frozen:
            self._frozen = True
            _HeapFreeze.open()

    def spider_closed(self) -> None:
        if self._frozen:
            self._frozen = False
            _HeapFreeze.close()
        self.pacer.close()
        for name, value in self.pacer.budget.stats.items():
            self.stats.set_value(f"politeness/budget/{name}", value)


class _HeapFreeze:
    """``gc.freeze`` for the crawls of this process that ask for it (``POLITENESS_GC_FREEZE``).

    Everything alive when a crawl opens (Scrapy, Twisted, the project's modules and components)
    moves to the collector's permanent generation, so full collections no longer walk
    it: unfrozen, each one stalled a worker's reactor 0.1-0.25 s every 3 s at 50 requests/s, and
    the slots due meanwhile (one interval of 55 ms each at 18/s) were dropped. The heap is
    collected first (no garbage is frozen) and thawed when the last such crawl closes (the freeze
    is process-wide).
    """

    crawls = 0

    @classmethod
    def open(cls) -> None:
        if not cls.crawls:
            gc.collect()
        cls.crawls += 1
        gc.freeze()

    @classmethod
    def close(cls) -> None:
        cls.crawls = max(cls.crawls - 1, 0)
        if not cls.crawls:
            gc.unfreeze()
