"""A consumer process for the redelivery test: ``rabbitmq_consumer.py URL QUEUE N``.

Takes N deliveries through crawlfleet's PriorityQueue, prints each body, never acks, then waits
to be killed.
"""

from __future__ import annotations

import sys
import time

from scrapy.settings import Settings

from crawlfleet.frontier.rabbitmq import PriorityQueue


def main() -> None:
    url, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    queue = PriorityQueue.from_settings(Settings({"RABBITMQ_URL": url}), name, prefetch=n)
    queue.open()
    taken = 0
    while taken < n:
        delivery = queue.pop()
        if delivery is None:
            time.sleep(0.01)
            continue
        print(delivery.body.decode(), flush=True)
        taken += 1
    time.sleep(600)


if __name__ == "__main__":
    main()
