"""The book's Bloom filter crawl: ``bloom_crawl.py SITE_URL RESULT SETTINGS_JSON``.

The spider requests pages 0-9, then pages 0-99 (so ten repeats), and writes the close reason,
the number of pages parsed and the crawl stats to RESULT as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response


class BookSpider(Spider):
    name = "bloomtest"

    def __init__(self, site: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.site = site
        self.parsed = 0

    async def start(self) -> AsyncIterator[Any]:
        for i in range(10):
            yield Request(f"{self.site}/page/{i}")
        for i in range(100):
            yield Request(f"{self.site}/page/{i}")

    def parse(self, response: Response) -> None:
        self.parsed += 1


def main() -> None:
    site, result, settings = sys.argv[1:4]
    process = CrawlerProcess(json.loads(settings))
    crawler = process.create_crawler(BookSpider)

    def closed(spider: BookSpider, reason: str) -> None:
        stats = {
            k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, int | float | str)
        }
        with open(result, "w") as f:
            json.dump({"reason": reason, "parsed": spider.parsed, "stats": stats}, f)

    crawler.signals.connect(closed, signal=signals.spider_closed)
    process.crawl(crawler, site=site)
    process.start()


if __name__ == "__main__":
    main()
