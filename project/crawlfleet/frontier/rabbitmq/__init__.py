"""RabbitMQ as the frontier's queue.

``SCHEDULER_QUEUE_CLASS = "crawlfleet.frontier.rabbitmq.PriorityQueue"``.

The duplicate filter and the crawl's coordination stay on Redis; see docs/design.md (RabbitMQ).
"""

from crawlfleet.frontier.rabbitmq.client import BrokerConfigError
from crawlfleet.frontier.rabbitmq.queue import PriorityQueue

__all__ = ["BrokerConfigError", "PriorityQueue"]
