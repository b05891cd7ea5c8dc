"""Which spiders start through start_requests(), and what their adopted start() yields."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from scrapy import Request, Spider
from scrapy.spiders import CrawlSpider, SitemapSpider
from scrapy.utils.test import get_crawler

from crawlfleet.frontier.spiderstart import (
    adopt_start_requests,
    keep_start_items_if,
    uses_start_requests,
)


class Classic(Spider):
    name = "classic"

    def start_requests(self) -> Any:
        yield Request("http://127.0.0.1:9/a")
        yield Request("http://127.0.0.1:9/b")


class Modern(Spider):
    name = "modern"

    async def start(self) -> AsyncIterator[Any]:
        yield {"item": 1}
        yield Request("http://127.0.0.1:9/m")


class Both(Classic):
    """start() more derived than start_requests(): start() wins, as in Scrapy."""

    async def start(self) -> AsyncIterator[Any]:
        yield Request("http://127.0.0.1:9/start")


class ClassicOverModern(Modern):
    """start_requests() more derived than start(): start_requests() wins, as before Scrapy 2.13."""

    def start_requests(self) -> Any:
        return [Request("http://127.0.0.1:9/override")]


class SitemapClassic(SitemapSpider):
    name = "sitemap"

    def start_requests(self) -> Any:
        return iter([Request("http://127.0.0.1:9/sitemap.xml")])


class NoneClassic(Spider):
    name = "none"

    def start_requests(self) -> Any:
        return None


class AsyncClassic(Spider):
    name = "asyncclassic"

    async def start_requests(self) -> AsyncIterator[Any]:
        yield Request("http://127.0.0.1:9/async")


def _urls(spider: Spider) -> list[Any]:
    async def collect() -> list[Any]:
        return [
            x.url if isinstance(x, Request) else x
            async for x in spider.start()  # type: ignore[attr-defined]
        ]

    return asyncio.run(collect())


def _spider(cls: type[Spider]) -> Spider:
    crawler = get_crawler(cls)
    crawler.spider = cls.from_crawler(crawler)
    return crawler.spider


def test_which_classes_start_with_start_requests() -> None:
    assert uses_start_requests(Classic)
    assert uses_start_requests(ClassicOverModern)
    assert uses_start_requests(SitemapClassic)
    assert not uses_start_requests(Modern)
    assert not uses_start_requests(Both)
    assert not uses_start_requests(Spider)
    assert not uses_start_requests(CrawlSpider)


def test_adopted_start_yields_start_requests_lazily_and_once() -> None:
    spider = _spider(Classic)
    assert adopt_start_requests(spider)
    assert not adopt_start_requests(spider)  # idempotent
    assert _urls(spider) == ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]
    for cls, expected in (
        (ClassicOverModern, ["http://127.0.0.1:9/override"]),
        (SitemapClassic, ["http://127.0.0.1:9/sitemap.xml"]),
        (NoneClassic, []),
        (AsyncClassic, ["http://127.0.0.1:9/async"]),
    ):
        adopted = _spider(cls)
        assert adopt_start_requests(adopted), cls
        assert _urls(adopted) == expected, cls


def test_spiders_with_their_own_start_are_left_alone() -> None:
    for cls in (Modern, Both):
        spider = _spider(cls)
        assert not adopt_start_requests(spider)
        assert "start" not in vars(spider)


def test_start_items_are_kept_only_while_seeding() -> None:
    seeding = {"now": False}
    spider = _spider(Modern)
    keep_start_items_if(spider, lambda: seeding["now"])
    assert _urls(spider) == ["http://127.0.0.1:9/m"]
    assert spider.crawler.stats.get_value("scheduler/start_items_skipped") == 1
    seeding["now"] = True
    assert _urls(spider) == [{"item": 1}, "http://127.0.0.1:9/m"]
