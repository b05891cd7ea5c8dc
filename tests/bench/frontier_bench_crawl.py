"""One benchmark crawl: ``frontier_bench_crawl.py MODE SITE REDIS_URL RESULT_JSON``.

MODE is ``scrapy`` (Scrapy's default scheduler, in memory), ``crawlfleet``, ``crawlfleet-batch``
(with ``SCHEDULER_ENQUEUE_BATCH``) or ``scrapy-redis`` (run with the peers' python, where
scrapy-redis 0.9.1 is installed). ``ops-crawlfleet``, ``ops-crawlfleet-batch`` and
``ops-scrapy-redis`` drive the scheduler directly instead (SITE is then the number of requests)
and report round trips per new enqueue, per duplicate enqueue and per pop.

Round trips are counted by a ``redis.Connection`` subclass passed through ``REDIS_PARAMS``: one
per packed send, i.e. one per command or per pipeline batch — round trips, not commands (a Lua
script is one round trip however many commands it runs). Writes pages, elapsed seconds (spider
open → last response), CPU seconds and round trips (all, from open to close, and those spent
enqueueing and in ``next_request``) to RESULT_JSON.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import redis
from scrapy import Request, Spider, signals
from scrapy.crawler import CrawlerProcess


class CountingConnection(redis.Connection):
    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


COUNTS = {"enqueue_calls": 0, "enqueue_rt": 0, "pop_calls": 0, "pop_rt": 0}


def counting(scheduler_cls: type) -> type:
    class Counting(scheduler_cls):  # type: ignore[misc, valid-type]
        _in_enqueue = False

        def enqueue_request(self, request: Request) -> bool:
            before = CountingConnection.sent
            self._in_enqueue = True
            try:
                result = super().enqueue_request(request)
            finally:
                self._in_enqueue = False
            COUNTS["enqueue_calls"] += 1
            COUNTS["enqueue_rt"] += CountingConnection.sent - before
            return bool(result)

        def _flush_pending(self) -> Any:
            # crawlfleet with SCHEDULER_ENQUEUE_BATCH: the batched enqueues' round trips
            if self._in_enqueue:
                return super()._flush_pending()
            before = CountingConnection.sent
            result = super()._flush_pending()
            COUNTS["enqueue_rt"] += CountingConnection.sent - before
            return result

        def next_request(self) -> Request | None:
            before = CountingConnection.sent
            request = super().next_request()
            if request is not None:
                COUNTS["pop_calls"] += 1
            COUNTS["pop_rt"] += CountingConnection.sent - before
            return request

    return Counting


def links(response: Any) -> Any:
    for href in response.css("a::attr(href)").getall():
        yield response.follow(href)


def ops(mode: str, n: int, redis_url: str) -> dict[str, float]:
    from scrapy.utils.test import get_crawler

    settings: dict[str, Any] = {
        "REDIS_URL": redis_url,
        "REDIS_PARAMS": {"connection_class": CountingConnection},
    }
    if mode.startswith("ops-crawlfleet"):
        from crawlfleet.frontier.scheduler import Scheduler

        scheduler_cls: Any = Scheduler
        settings["DUPEFILTER_CLASS"] = "crawlfleet.frontier.dupefilter.SetDupeFilter"
        settings["SCHEDULER_ENQUEUE_BATCH"] = mode == "ops-crawlfleet-batch"
        settings["POLITENESS_ENABLED"] = False  # the frontier alone, as in bench_hub
    else:
        from scrapy_redis.scheduler import Scheduler as RedisScheduler

        scheduler_cls = RedisScheduler
        settings["DUPEFILTER_CLASS"] = "scrapy_redis.dupefilter.RFPDupeFilter"
    crawler = get_crawler(type("OpsSpider", (Spider,), {"name": "ops"}), settings)
    crawler.spider = crawler._create_spider()
    scheduler = scheduler_cls.from_crawler(crawler)
    scheduler.open(crawler.spider)
    counts = {}
    for phase in ("new", "duplicate"):
        before, started = CountingConnection.sent, time.perf_counter()
        for i in range(n):
            scheduler.enqueue_request(Request(f"https://bench.test/{i}"))
            if mode == "ops-crawlfleet-batch" and i % 10 == 9:
                scheduler._flush_pending()  # as one reactor turn would: ~10 links per page
        counts[f"{phase}_us"] = (time.perf_counter() - started) / n * 1e6
        counts[phase] = (CountingConnection.sent - before) / n
    before, started = CountingConnection.sent, time.perf_counter()
    popped = sum(scheduler.next_request() is not None for _ in range(n))
    counts["pop_us"] = (time.perf_counter() - started) / max(popped, 1) * 1e6
    counts["pop"] = (CountingConnection.sent - before) / max(popped, 1)
    counts["popped"] = popped
    scheduler.close("finished")
    return counts


def main() -> None:
    mode, site, redis_url, result = sys.argv[1:5]
    if mode.startswith("ops-"):
        with open(result, "w") as f:
            json.dump(ops(mode, int(site), redis_url), f)
        return
    settings: dict[str, Any] = {
        "CONCURRENT_REQUESTS": 32,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "RETRY_ENABLED": False,
        "COOKIES_ENABLED": False,
    }

    class StartSpider(Spider):
        """Scrapy's own scheduler and crawlfleet's: the crawl starts from start()."""

        name = "bench"
        parse = staticmethod(links)  # type: ignore[assignment]

        async def start(self) -> Any:
            yield Request(site + "/p/0")

    spider_cls: type[Spider] = StartSpider
    if mode in ("crawlfleet", "crawlfleet-batch"):
        from crawlfleet.frontier.scheduler import Scheduler

        settings.update(
            SCHEDULER=counting(Scheduler),
            DUPEFILTER_CLASS="crawlfleet.frontier.dupefilter.SetDupeFilter",
            REDIS_URL=redis_url,
            REDIS_PARAMS={"connection_class": CountingConnection},
            SCHEDULER_ENQUEUE_BATCH=mode == "crawlfleet-batch",
            POLITENESS_ENABLED=False,  # the frontier alone, as in bench_hub
        )
    elif mode != "scrapy":
        # scrapy-redis 0.9.1 on Scrapy 2.19: its scheduler needs DUPEFILTER_CLASS set explicitly,
        # and start() is not called, so the crawl is seeded through the start_urls key.
        from scrapy_redis.scheduler import Scheduler as RedisScheduler
        from scrapy_redis.spiders import RedisSpider

        settings.update(
            SCHEDULER=counting(RedisScheduler),
            DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
            REDIS_URL=redis_url,
            REDIS_PARAMS={"connection_class": CountingConnection},
            MAX_IDLE_TIME_BEFORE_CLOSE=1,
        )
        redis.Redis.from_url(redis_url).lpush("bench:start_urls", site + "/p/0")

        class PeerSpider(RedisSpider):
            name = "bench"
            parse = staticmethod(links)  # type: ignore[assignment]

        spider_cls = PeerSpider

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(spider_cls)
    marks: dict[str, float] = {}

    def opened(spider: Spider) -> None:
        marks["open"] = time.monotonic()
        marks["cpu_open"] = time.process_time()
        marks["rt_open"] = CountingConnection.sent

    def received(response: Any) -> None:
        marks["last"] = time.monotonic()
        marks["rt_last"] = CountingConnection.sent

    def closed(spider: Spider) -> None:
        marks["rt_close"] = CountingConnection.sent
        marks["cpu_close"] = time.process_time()

    crawler.signals.connect(opened, signal=signals.spider_opened)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    crawler.signals.connect(received, signal=signals.response_received)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    out = {
        "pages": stats.get("response_received_count", 0),
        "elapsed": marks.get("last", 0) - marks.get("open", 0),
        # CPU seconds of this process (user + system): unlike wall time, barely affected by
        # other load on the machine
        "cpu": marks.get("cpu_close", 0) - marks.get("cpu_open", 0),
        # round trips from open to close, so that every enqueue counted is inside the window
        "rt_total": marks.get("rt_close", 0) - marks.get("rt_open", 0),
        **COUNTS,
    }
    with open(result, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
