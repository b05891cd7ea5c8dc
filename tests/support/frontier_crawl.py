"""A crawl worker for the frontier tests: ``frontier_crawl.py SITE OUT RESULT SETTINGS [STYLE]``.

Follows every link of the test site, appends each parsed URL path to OUT (flushed per line, so a
SIGKILL keeps what was written), and writes the close reason and stats to RESULT on close.

STYLE picks how the spider starts (every way a Scrapy spider can): ``start`` (the default, an
``async def start()`` with the root page), ``start_urls`` (one URL), ``start_urls_many`` (every
page listed, nothing followed), ``start_requests`` (a classic synchronous ``start_requests()``
yielding every page, as the Scrapy tutorial teaches), ``start_mixed`` (``start()`` yielding items
as well as requests), ``crawlspider`` (a ``CrawlSpider`` with ``rules``) and ``seeded`` (no start
requests at all: fed only through ``<spider>:start_urls``, scrapy-redis's RedisSpider habit).
The spider's name is ``site`` in every style.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider, signals
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class SiteSpider(Spider):
    name = "site"

    def __init__(self, site: str, out: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.site = site
        self.out = open(out, "a")  # noqa: SIM115 - kept open for the whole crawl

    async def start(self) -> AsyncIterator[Any]:
        # dont_filter=True like Scrapy's default start requests: seeding twice would show.
        yield Request(self.site + "/p/0", dont_filter=True)

    def parse(self, response: Response) -> Any:
        self.out.write(urlsplit(response.url).path + "\n")
        self.out.flush()
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)


class Recording:
    """Appends each parsed path to OUT; the pages a style's spider lists come from ``pages``."""

    site: str
    out: Any

    def record(self, response: Response) -> None:
        self.out.write(urlsplit(response.url).path + "\n")
        self.out.flush()

    def pages(self) -> list[str]:
        return [f"{self.site}/p/{i}" for i in range(int(os.environ["SITE_PAGES"]))]


class StartUrlsSpider(SiteSpider):
    """Scrapy's default start(): ``start_urls`` with one URL, links followed."""

    def __init__(self, site: str, out: str, **kwargs: Any) -> None:
        super().__init__(site, out, **kwargs)
        self.start_urls = [site + "/p/0"]

    start = Spider.start  # type: ignore[assignment]


class StartUrlsManySpider(StartUrlsSpider, Recording):
    """``start_urls`` listing every page; nothing followed (they are dont_filter, as in Scrapy)."""

    def __init__(self, site: str, out: str, **kwargs: Any) -> None:
        super().__init__(site, out, **kwargs)
        self.start_urls = self.pages()

    def parse(self, response: Response) -> Any:
        self.record(response)
        return []


class StartRequestsSpider(Spider, Recording):
    """The classic way: a synchronous start_requests() yielding every page, links followed."""

    name = "site"

    def __init__(self, site: str, out: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.site = site
        self.out = open(out, "a")  # noqa: SIM115 - kept open for the whole crawl

    def start_requests(self) -> Any:
        for url in self.pages():
            yield Request(url, callback=self.parse_page, priority=1)

    def parse_page(self, response: Response) -> Any:
        self.record(response)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_page)


class StartMixedSpider(SiteSpider):
    """async start() yielding items before, between and after its requests."""

    async def start(self) -> AsyncIterator[Any]:
        yield {"kind": "start item", "n": 0}
        yield Request(self.site + "/p/0", dont_filter=True)
        yield {"kind": "start item", "n": 1}
        yield Request(self.site + "/p/1")
        yield {"kind": "start item", "n": 2}


class SiteCrawlSpider(CrawlSpider, Recording):
    """A CrawlSpider following every /p/ link through its rules."""

    name = "site"
    rules = (Rule(LinkExtractor(allow=r"/p/\d+$"), callback="parse_page", follow=True),)

    def __init__(self, site: str, out: str, **kwargs: Any) -> None:
        self.start_urls = [site + "/p/0"]
        super().__init__(**kwargs)
        self.site = site
        self.out = open(out, "a")  # noqa: SIM115 - kept open for the whole crawl

    def parse_start_url(self, response: Response, **kwargs: Any) -> Any:
        self.record(response)
        return []

    def parse_page(self, response: Response) -> Any:
        self.record(response)
        return []


class SeededSpider(SiteSpider):
    """No start requests: the crawl is fed through ``site:start_urls`` only."""

    async def start(self) -> AsyncIterator[Any]:
        return
        yield


STYLES: dict[str, type[Spider]] = {
    "start": SiteSpider,
    "start_urls": StartUrlsSpider,
    "start_urls_many": StartUrlsManySpider,
    "start_requests": StartRequestsSpider,
    "start_mixed": StartMixedSpider,
    "crawlspider": SiteCrawlSpider,
    "seeded": SeededSpider,
}


def main() -> None:
    site, out, result, settings = sys.argv[1:5]
    style = sys.argv[5] if len(sys.argv) > 5 else "start"
    process = CrawlerProcess(json.loads(settings))
    crawler = process.create_crawler(STYLES[style])

    def closed(spider: Spider, reason: str) -> None:
        stats = {
            k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, int | float | str)
        }
        with open(result, "w") as f:
            json.dump({"reason": reason, "stats": stats}, f)

    crawler.signals.connect(closed, signal=signals.spider_closed)
    process.crawl(crawler, site=site, out=out)
    process.start()
    sys.exit(0 if os.path.exists(result) else 1)  # no result: the spider never opened


if __name__ == "__main__":
    main()
