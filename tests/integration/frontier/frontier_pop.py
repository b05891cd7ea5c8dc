"""Pop every request of the ``site`` crawl and print its URL: ``frontier_pop.py REDIS_URL QUEUE``.

Used by the concurrency test: two of these run at once against the same queue, starting
together when the test sets ``test:go``.
"""

from __future__ import annotations

import sys
import time

from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawlfleet.frontier.scheduler import Scheduler


class SiteSpider(Spider):
    name = "site"


def main() -> None:
    url, queue_class = sys.argv[1:3]
    crawler = get_crawler(
        SiteSpider,
        {
            "REDIS_URL": url,
            "SCHEDULER_QUEUE_CLASS": queue_class,
            "SCHEDULER_PREFETCH": 3,
            "POLITENESS_ENABLED": False,
        },
    )
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    # start together with the other popper: the test sets test:go once both are ready
    scheduler.client.incr("test:ready")
    while not scheduler.client.get("test:go"):
        time.sleep(0.01)
    while (request := scheduler.next_request()) is not None:
        print(request.url, flush=True)
    scheduler.close("finished")


if __name__ == "__main__":
    main()
