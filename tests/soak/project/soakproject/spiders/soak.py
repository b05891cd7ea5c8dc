"""The soak's spider: from the roots it is given (``-a roots=URL,URL``, or ``SOAK_ROOTS`` in its
environment, as the lab's workers get it), follow every link; one item per page (its id is
``host/page``, the page's ``<h1>``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import scrapy


class SoakSpider(scrapy.Spider):
    name = "soak"

    def __init__(self, roots: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        roots = roots or os.environ.get("SOAK_ROOTS", "")
        self.roots = [url for url in roots.split(",") if url]

    async def start(self) -> Any:
        for url in self.roots:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Any) -> Iterator[Any]:
        yield {"id": response.css("h1::text").get(), "url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
