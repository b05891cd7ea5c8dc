"""The crawl queue on RabbitMQ: ``crawlfleet.frontier.rabbitmq.PriorityQueue``.

A durable classic queue declared with ``x-max-priority`` (``SCHEDULER_QUEUE_MAX_PRIORITY``);
a request's message priority is ``request.priority + SCHEDULER_QUEUE_PRIORITY_OFFSET``, clamped to
``0 … max priority`` (the broker orders by it: higher first, first in first out among equals).
Messages are persistent; deliveries are acknowledged by hand (``ack``) only when their request is
done, so the broker gives a dead worker's messages to the others. The frontier scheduler sees this
class and runs :class:`crawlfleet.frontier.rabbitmq.scheduler.RabbitMQScheduler` for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from crawlfleet.frontier.config import FrontierConfigError, seconds_setting, whole_setting
from crawlfleet.frontier.rabbitmq.client import BrokerClient, Delivery, QueueSpec
from crawlfleet.settingtable import default

DEFAULT_RABBITMQ_URL: str = default("RABBITMQ_URL")


@dataclass(frozen=True)
class RabbitSettings:
    """The RabbitMQ settings, validated (each error names its setting)."""

    url: str
    max_priority: int
    priority_offset: int
    connect_timeout: float
    reconnect_max: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RabbitSettings:
        max_priority = whole_setting(settings, "SCHEDULER_QUEUE_MAX_PRIORITY")
        if not 1 <= max_priority <= 255:
            raise FrontierConfigError(
                f"SCHEDULER_QUEUE_MAX_PRIORITY must be 1 … 255 (RabbitMQ's limit), "
                f"got {max_priority}"
            )
        return cls(
            url=str(settings.get("RABBITMQ_URL") or default("RABBITMQ_URL")),
            max_priority=max_priority,
            priority_offset=whole_setting(settings, "SCHEDULER_QUEUE_PRIORITY_OFFSET"),
            connect_timeout=seconds_setting(settings, "RABBITMQ_CONNECT_TIMEOUT"),
            reconnect_max=seconds_setting(settings, "RABBITMQ_RECONNECT_MAX_DELAY"),
        )


class PriorityQueue:
    """The queue and its connection; ``push``/``pop``/``ack``/``nack``/``len`` never block the
    caller on the broker (except ``len``, which asks for a fresh count)."""

    # The frontier scheduler runs this scheduler for queues of this class.
    scheduler_path = "crawlfleet.frontier.rabbitmq.scheduler.RabbitMQScheduler"

    def __init__(self, client: BrokerClient, max_priority: int, priority_offset: int) -> None:
        self.client = client
        self.key = client.spec.name
        self.max_priority = max_priority
        self.priority_offset = priority_offset

    @classmethod
    def from_settings(
        cls,
        settings: BaseSettings,
        name: str,
        *,
        prefetch: int,
        flush: bool = False,
        consume: bool = True,
        count_interval: float = 0.2,
    ) -> PriorityQueue:
        rs = RabbitSettings.from_settings(settings)
        spec = QueueSpec(name, rs.max_priority, prefetch, flush)
        client = BrokerClient(
            rs.url,
            spec,
            consume=consume,
            connect_timeout=rs.connect_timeout,
            reconnect_max=rs.reconnect_max,
            count_interval=count_interval,
        )
        return cls(client, rs.max_priority, rs.priority_offset)

    def message_priority(self, priority: int) -> int:
        return min(max(priority + self.priority_offset, 0), self.max_priority)

    def open(self) -> None:
        """Connect and declare (raises a one-line ``BrokerConfigError`` when that cannot work)."""
        self.client.start(wait=True)

    def close(self, timeout: float = 10.0) -> None:
        self.client.stop(timeout)

    def push(self, payload: bytes, priority: int) -> int:
        """Publish (committed in the background); returns the publish sequence number."""
        return self.client.publish(payload, self.message_priority(priority))

    def pop(self) -> Delivery | None:
        """The next delivery of the current connection, or None. Deliveries of a connection
        that was lost are skipped: the broker has already put them back."""
        deliveries = self.client.deliveries
        while deliveries:
            delivery = deliveries.popleft()
            if delivery.generation == self.client.generation:
                return delivery
        return None

    def ack(self, delivery: Delivery) -> None:
        self.client.ack(delivery)

    def nack(self, delivery: Delivery) -> None:
        self.client.nack(delivery)

    def valid(self, delivery: Delivery) -> bool:
        """Whether the delivery's connection is still the current one (an ack can still work)."""
        return delivery.generation == self.client.generation and self.client.connected.is_set()

    def clear(self) -> None:
        self.client.purge(self.client.connect_timeout)

    def __len__(self) -> int:
        """Ready messages in the broker now (one round trip; messages held by workers excluded)."""
        return self.client.count(self.client.connect_timeout)

    def stats(self) -> dict[str, Any]:
        return {"queued": self.client.message_count, "consumers": self.client.consumers}
