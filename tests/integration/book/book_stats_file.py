"""Scrapy extension for the book tests: write the crawl's final stats as JSON to BOOK_STATS_FILE."""

from __future__ import annotations

import json
from pathlib import Path

from scrapy import signals
from scrapy.crawler import Crawler


class StatsToFile:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.path = Path(crawler.settings["BOOK_STATS_FILE"])
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StatsToFile:
        return cls(crawler)

    def spider_closed(self) -> None:
        assert self.crawler.stats is not None
        stats = self.crawler.stats.get_stats()
        self.path.write_text(json.dumps(stats, default=str, indent=1))
