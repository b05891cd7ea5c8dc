"""Drive one frontier scheduler directly: ``rabbitmq_bench_ops.py MODE N REDIS_URL RABBIT_URL``.

MODE is ``redis`` (crawlfleet.frontier.queues.PriorityQueue) or ``rabbitmq``
(crawlfleet.frontier.rabbitmq.PriorityQueue); both use the Redis SetDupeFilter. Enqueues N new
requests (duplicate check included), then pops (and acknowledges) all of them; prints JSON with
the rates. Run in a subprocess so each backend gets a fresh process.
"""

from __future__ import annotations

import json
import sys
import time

from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from crawlfleet.frontier.scheduler import Scheduler

QUEUES = {
    "redis": "crawlfleet.frontier.queues.PriorityQueue",
    "rabbitmq": "crawlfleet.frontier.rabbitmq.PriorityQueue",
}


def main() -> None:
    mode, n, redis_url, rabbit_url = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    crawler = get_crawler(
        type("OpsSpider", (Spider,), {"name": f"ops{mode}"}),
        {
            "REDIS_URL": redis_url,
            "RABBITMQ_URL": rabbit_url,
            "SCHEDULER_QUEUE_CLASS": QUEUES[mode],
            "DUPEFILTER_CLASS": "crawlfleet.frontier.dupefilter.SetDupeFilter",
            "SCHEDULER_PREFETCH": 8,
            "CONCURRENT_REQUESTS": 32,
            "POLITENESS_ENABLED": False,  # the queues alone, as in bench_hub
        },
    )
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    started = time.perf_counter()
    for i in range(n):
        scheduler.enqueue_request(Request(f"https://bench.test/{i}", priority=i % 10))
    if mode == "rabbitmq":  # count the time until the broker has committed every publish
        client = scheduler.queue.client
        while not client.published_all():
            time.sleep(0.001)
    enqueue = time.perf_counter() - started
    popped, started = 0, time.perf_counter()
    deadline = time.monotonic() + 120
    while popped < n and time.monotonic() < deadline:
        if scheduler.next_request() is None:
            time.sleep(0.0005)  # a RabbitMQ delivery may still be on its way
        else:
            popped += 1
    pop = time.perf_counter() - started
    scheduler.close("finished")
    print(json.dumps({"enqueue_per_s": n / enqueue, "pop_per_s": popped / pop, "popped": popped}))


if __name__ == "__main__":
    main()
