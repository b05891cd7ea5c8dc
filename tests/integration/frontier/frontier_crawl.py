"""A crawl worker for the frontier tests: ``frontier_crawl.py SITE_URL OUT RESULT SETTINGS_JSON``.

Follows every link of the test site, appends each parsed URL path to OUT (flushed per line, so a
SIGKILL keeps what was written), and writes the close reason and stats to RESULT on close.
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


def main() -> None:
    site, out, result, settings = sys.argv[1:5]
    process = CrawlerProcess(json.loads(settings))
    crawler = process.create_crawler(SiteSpider)

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
