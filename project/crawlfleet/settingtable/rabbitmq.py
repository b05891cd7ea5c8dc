"""The settings of the frontier's RabbitMQ queue; the Redis frontier's that apply are listed
again."""

from __future__ import annotations

from crawlfleet.settingtable.row import Also, Setting

RABBITMQ = (
    Also(
        "SCHEDULER_QUEUE_CLASS",
        "`crawlfleet.frontier.rabbitmq.PriorityQueue` puts the queue on RabbitMQ",
        shown="`crawlfleet.frontier.queues.PriorityQueue`",
    ),
    Setting(
        "RABBITMQ_URL",
        "amqp://guest:guest@127.0.0.1:5672/%2F",
        (
            "the broker (`amqp://user:password@host:port/vhost`, vhost URL-encoded); the password "
            "is masked in every log and error"
        ),
    ),
    Also(
        "SCHEDULER_QUEUE_KEY",
        "name of the RabbitMQ queue",
    ),
    Setting(
        "SCHEDULER_QUEUE_MAX_PRIORITY",
        100,
        "`x-max-priority` of the queue (1 … 255)",
    ),
    Setting(
        "SCHEDULER_QUEUE_PRIORITY_OFFSET",
        0,
        (
            "added to `request.priority` before clamping to `0 … max`; raise it when your spiders "
            "use negative priorities (e.g. `DEPTH_PRIORITY`)"
        ),
    ),
    Also(
        "SCHEDULER_FLUSH_ON_START",
        (
            "also deletes and re-declares the queue (drops its messages), which applies a changed "
            "declaration"
        ),
    ),
    Also(
        "SCHEDULER_PREFETCH",
        "deliveries decoded into requests at a time",
    ),
    Also(
        "CONCURRENT_REQUESTS",
        (
            "also the consumer's prefetch count (unacknowledged messages per worker), plus "
            "`POLITENESS_LOOKAHEAD` with the politeness pacer"
        ),
        shown="`16`",
    ),
    Setting(
        "RABBITMQ_CONNECT_TIMEOUT",
        10,
        "seconds to connect (and, at start, to wait for the first connection)",
    ),
    Setting(
        "RABBITMQ_RECONNECT_MAX_DELAY",
        30,
        "longest back-off between reconnection attempts, seconds",
    ),
)
