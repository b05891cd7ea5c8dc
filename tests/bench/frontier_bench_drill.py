"""One worker of the crash drill: ``frontier_bench_drill.py MODE SITE REDIS_URL OUT``.

MODE ``crawlfleet`` is a project on the fleet's defaults: ``ADDONS = {"crawlfleet.addon.Fleet":
0}`` and ``REDIS_URL`` (the Bloom dupefilter, the items pipeline and the worker stats the add-on
enables, every frontier setting at its default), with one exception: ``POLITENESS_ENABLED=False``,
because its default of about one page per second per site would make the drill measure the pace
(scrapy-redis has no politeness), not the frontier. MODE
``scrapy-redis`` (run with the peers' python) is scrapy-redis 0.9.1 on its defaults, with its
items pipeline and ``MAX_IDLE_TIME_BEFORE_CLOSE=2`` (its default, 0, never closes); the crawl is
seeded through ``drill:start_urls`` by the bench. The spider follows every link of
frontier_bench_site.py and yields one item per page; each parsed URL path is appended to OUT
(flushed per line, so a SIGKILL keeps what was written).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response

COMMON: dict[str, Any] = {
    "LOG_LEVEL": "WARNING",
    "TELNETCONSOLE_ENABLED": False,
    "ROBOTSTXT_OBEY": False,
}


def parse(spider: Any, response: Response) -> Any:
    spider.out.write(urlsplit(response.url).path + "\n")
    spider.out.flush()
    yield {"url": response.url, "links": len(response.css("a"))}
    for href in response.css("a::attr(href)").getall():
        yield response.follow(href)


def main() -> None:
    mode, site, redis_url, out = sys.argv[1:5]
    settings = {**COMMON, "REDIS_URL": redis_url}
    base: type[Spider]
    if mode == "crawlfleet":
        settings.update(ADDONS={"crawlfleet.addon.Fleet": 0}, POLITENESS_ENABLED=False)
        base = Spider
    else:
        from scrapy_redis.spiders import RedisSpider

        settings.update(
            SCHEDULER="scrapy_redis.scheduler.Scheduler",
            DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
            ITEM_PIPELINES={"scrapy_redis.pipelines.RedisPipeline": 300},
            MAX_IDLE_TIME_BEFORE_CLOSE=2,
        )
        base = RedisSpider

    class DrillSpider(base):  # type: ignore[misc, valid-type]
        name = "drill"

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.out = open(out, "a")  # noqa: SIM115 - kept open for the whole crawl

        def parse(self, response: Response, **kwargs: Any) -> Any:
            return parse(self, response)

    class FleetDrillSpider(DrillSpider):
        async def start(self) -> AsyncIterator[Any]:
            yield Request(site + "/p/0", dont_filter=True)

    process = CrawlerProcess(settings)
    process.crawl(FleetDrillSpider if mode == "crawlfleet" else DrillSpider)
    process.start()


if __name__ == "__main__":
    main()
