"""Frontier schedulers built the way Scrapy builds them (``get_crawler``, ``from_crawler``) and
driven directly, without an engine: the ``make_scheduler`` fixture of the frontier's integration
tests (tests/integration/frontier/conftest.py) and the spider they run for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawlfleet.frontier.scheduler import Scheduler

MakeScheduler = Callable[..., Scheduler]


class SiteSpider(Spider):
    name = "site"

    def parse_page(self, response: object) -> None:
        pass


POLITENESS_MIDDLEWARE = "crawlfleet.politeness.middleware.PolitenessMiddleware"


@contextmanager
def schedulers(redis_url: str, defaults: dict[str, object]) -> Iterator[MakeScheduler]:
    """``make(**settings)``: an opened scheduler on ``redis_url`` (prefetch 1, heartbeat 10 s,
    then ``defaults``, then ``settings``); every one made has its loops stopped at the end."""
    opened: list[Scheduler] = []

    def make(**settings: object) -> Scheduler:
        base: dict[str, object] = {
            "REDIS_URL": redis_url,
            "SCHEDULER_PREFETCH": 1,
            "SCHEDULER_HEARTBEAT_INTERVAL": 10,
            # the frontier alone; a test that lists the PolitenessMiddleware gets the budget
            "POLITENESS_ENABLED": POLITENESS_MIDDLEWARE
            in dict({**defaults, **settings}.get("DOWNLOADER_MIDDLEWARES") or {}),  # type: ignore[call-overload]
            **defaults,
        }
        crawler = get_crawler(SiteSpider, {**base, **settings})
        crawler.spider = crawler._create_spider()
        scheduler = Scheduler.from_crawler(crawler)
        scheduler.open(crawler.spider)
        opened.append(scheduler)
        return scheduler

    try:
        yield make
    finally:
        for scheduler in opened:
            scheduler._stop_loops()
