"""The `book` spider's requests and items, and the settings it reads from the environment."""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any

import pytest
from scrapy import Request
from scrapy.http import TextResponse
from scrapy.utils.test import get_crawler

import bookcrawler.settings
from bookcrawler.items import BookItem
from bookcrawler.spiders.book import BookSpider
from crawlfleet.demosite.catalogue import Catalogue

SITE = "http://127.0.0.1:8000"  # not contacted: responses are built from the catalogue


def make_spider() -> BookSpider:
    crawler = get_crawler(BookSpider, {"BOOK_SITE_URL": SITE + "/", "REDIS_URL": ""})
    return BookSpider.from_crawler(crawler)


def response(url: str, body: Any) -> TextResponse:
    return TextResponse(url, body=json.dumps(body).encode(), encoding="utf-8")


def test_first_list_page_enqueues_the_others_and_the_details() -> None:
    spider = make_spider()
    catalogue = Catalogue(40, seed=7)
    first = response(spider.list_url(0), {"count": 40, "results": catalogue.page(0, 18)})
    out = list(spider.parse_index(first, first=True))
    lists = [r for r in out if r.callback == spider.parse_index]
    details = [r for r in out if r.callback == spider.parse_detail]
    assert [r.url for r in lists] == [
        f"{SITE}/api/book/?limit=18&offset=18",
        f"{SITE}/api/book/?limit=18&offset=36",
    ]
    assert [r.url for r in details] == [f"{SITE}/api/book/{i}/" for i in catalogue.ids[:18]]
    assert {r.priority for r in details} == {2}
    assert spider.crawler.stats is not None
    assert spider.crawler.stats.get_value("book/total") == 40
    later = response(spider.list_url(36), {"count": 40, "results": catalogue.page(36, 18)})
    assert all(r.callback == spider.parse_detail for r in spider.parse_index(later))


def test_detail_page_becomes_a_book_item() -> None:
    spider = make_spider()
    book = Catalogue(5, seed=7).book(Catalogue(5, seed=7).ids[0])
    (item,) = spider.parse_detail(response(f"{SITE}/api/book/{book['id']}/", book))
    assert isinstance(item, BookItem)
    assert dict(item) == book


def test_start_is_the_first_list_page() -> None:
    spider = make_spider()

    async def first() -> Request:
        async for request in spider.start():
            return request
        raise AssertionError("no start request")

    request = asyncio.run(first())
    assert request.url == f"{SITE}/api/book/?limit=18&offset=0"
    assert request.cb_kwargs == {"first": True}


def test_settings_read_the_worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "REDIS_URL": "redis://:pw@hub:6379/0",
        "PROXYPOOL_URL": "http://hub:5555",
        "PROXYPOOL_API_KEY": "pk",
        "ACCOUNTPOOL_URL": "http://hub:6777",
        "ACCOUNTPOOL_API_KEY": "ak",
        "BOOK_SITE_URL": "http://target:8000",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        settings = importlib.reload(bookcrawler.settings)
        for name, value in env.items():
            assert getattr(settings, name) == value
        assert settings.SCHEDULER == "crawlfleet.frontier.scheduler.Scheduler"
        assert settings.DUPEFILTER_CLASS == "crawlfleet.frontier.dupefilter.BloomDupeFilter"
        assert set(settings.DOWNLOADER_MIDDLEWARES) == {
            "crawlfleet.middlewares.ProxyMiddleware",
            "crawlfleet.middlewares.AuthorizationMiddleware",
            "crawlfleet.politeness.middleware.PolitenessMiddleware",
        }
        middlewares = settings.DOWNLOADER_MIDDLEWARES
        assert middlewares["crawlfleet.middlewares.ProxyMiddleware"] < 750  # before HttpProxy…
        assert middlewares["crawlfleet.middlewares.AuthorizationMiddleware"] < 750
    finally:
        monkeypatch.undo()
        importlib.reload(bookcrawler.settings)
