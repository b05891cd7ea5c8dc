"""The ``book`` spider: list pages of the catalogue API, then every book's detail page.

As in the book: list pages (``/api/book/?limit=18&offset=…``) yield detail requests with
``priority=2``, so details are fetched before more list pages pile up. Every worker starts with
the first list page; the shared duplicate filter lets exactly one of them through, and that
worker enqueues the other list pages once it knows the catalogue's size.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import scrapy
from scrapy.http import Response

from bookcrawler.items import BookItem
from crawlfleet.hub.connect import redis_from_settings, redis_url
from crawlfleet.hub.keys import SpiderKeys

PAGE_SIZE = 18


class BookSpider(scrapy.Spider):
    name = "book"
    # Which account-pool site the AuthorizationMiddleware asks for tokens.
    accountpool_site = "demosite"

    @property
    def base_url(self) -> str:
        return str(self.settings.get("BOOK_SITE_URL") or "http://127.0.0.1:8000").rstrip("/")

    def list_url(self, offset: int) -> str:
        return f"{self.base_url}/api/book/?limit={PAGE_SIZE}&offset={offset}"

    async def start(self) -> AsyncIterator[Any]:
        yield scrapy.Request(self.list_url(0), callback=self.parse_index, cb_kwargs={"first": True})

    def parse_index(self, response: Response, first: bool = False) -> Iterator[scrapy.Request]:
        data = json.loads(response.body)
        if first:
            total = int(data["count"])
            self.record_total(total)
            for offset in range(PAGE_SIZE, total, PAGE_SIZE):
                yield scrapy.Request(self.list_url(offset), callback=self.parse_index)
        for result in data.get("results") or []:
            url = f"{self.base_url}/api/book/{result['id']}/"
            yield scrapy.Request(url, callback=self.parse_detail, priority=2)

    def parse_detail(self, response: Response) -> Iterator[BookItem]:
        data = json.loads(response.body)
        item = BookItem()
        for field in item.fields:
            item[field] = data.get(field)
        yield item

    def record_total(self, total: int) -> None:
        """The catalogue's size, for progress: a stat here and ``<spider>:total`` on the hub."""
        assert self.crawler.stats is not None
        self.crawler.stats.set_value("book/total", total)
        if self.settings.get("REDIS_URL"):
            key = SpiderKeys.for_url(self.name, redis_url(self.settings)).total
            redis_from_settings(self.settings, check=False).set(key, total)
