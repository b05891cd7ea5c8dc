"""The frontier's two queue backends as one test fixture, and the RabbitMQ broker the tests share.

``backend`` is parametrised over ``redis`` and ``rabbitmq`` (tests pick rows with
``indirect=["backend"]``): ``backend.settings(**extra)`` are a crawl worker's settings on that
backend, ``backend.assert_drained()`` checks that a finished crawl left no work behind. The
broker (``rabbit``) boots once per session, and only when a test asks for it: Erlang starts
slowly. The fixtures are registered once, by tests/conftest.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pytest
import redis
from rabbitmq_server import RabbitServer, start_rabbitmq

from support.crawl import frontier_settings

RABBITMQ_QUEUE_CLASS = "crawlfleet.frontier.rabbitmq.PriorityQueue"
BACKENDS = ("redis", "rabbitmq")


@pytest.fixture(scope="session")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitServer]:
    server = start_rabbitmq(tmp_path_factory.mktemp("rabbitmq"))
    yield server
    server.close()


@pytest.fixture
def rabbit_url(rabbit: RabbitServer) -> str:
    """The session broker's URL, with the broker running (a test may have stopped it)."""
    if not rabbit.running():
        rabbit.start()
    return rabbit.url


@pytest.fixture
def queue_name(rabbit_url: str) -> Iterator[str]:
    """A fresh queue name, deleted after the test."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    connection = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    connection.channel().queue_delete(name)
    connection.close()


def rabbitmq_settings(
    redis_url: str, rabbit_url: str, queue: str, **extra: object
) -> dict[str, object]:
    """Worker settings on the RabbitMQ queue (with the Redis dupefilter and coordination)."""
    options: dict[str, object] = {
        "SCHEDULER_QUEUE_CLASS": RABBITMQ_QUEUE_CLASS,
        "SCHEDULER_QUEUE_KEY": queue,
        "RABBITMQ_URL": rabbit_url,
        "SCHEDULER_IDLE_POLL_INTERVAL": 0.1,
    }
    return frontier_settings(redis_url, **{**options, **extra})


def ready_messages(rabbit_url: str, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    result = connection.channel().queue_declare(queue, passive=True)
    connection.close()
    return int(result.method.message_count)


def assert_redis_drained(client: redis.Redis) -> None:
    """No worker registered, no lease, no queued request of the spider ``site``."""
    assert client.zcard("site:workers") == 0
    assert not list(client.scan_iter("site:leases:*"))
    assert client.exists("site:requests") == 0
    assert not list(client.scan_iter("site:requests:*"))  # a keyed queue's sites


def assert_rabbitmq_drained(redis_url: str, rabbit_url: str, queue: str) -> None:
    """No worker registered, no outbox, no ready message on the broker."""
    client = redis.Redis.from_url(redis_url)
    assert client.zcard("site:rabbitmq:workers") == 0
    assert not list(client.scan_iter("site:rabbitmq:outbox:*"))
    assert ready_messages(rabbit_url, queue) == 0
    client.close()


@dataclass
class Backend:
    """One queue backend of a crawl: ``redis`` or ``rabbitmq`` (then with its broker and queue)."""

    name: str
    redis_url: str
    rabbit_url: str = ""
    queue: str = ""

    def settings(self, **extra: object) -> dict[str, object]:
        if self.name == "redis":
            return frontier_settings(self.redis_url, **extra)
        return rabbitmq_settings(self.redis_url, self.rabbit_url, self.queue, **extra)

    def assert_drained(self) -> None:
        if self.name == "redis":
            client = redis.Redis.from_url(self.redis_url)
            assert_redis_drained(client)
            client.close()
        else:
            assert_rabbitmq_drained(self.redis_url, self.rabbit_url, self.queue)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, redis_url: str) -> Backend:
    """The crawl's queue backend; the broker is started only for ``rabbitmq``."""
    if request.param == "redis":
        return Backend("redis", redis_url)
    rabbit_url = request.getfixturevalue("rabbit_url")
    return Backend("rabbitmq", redis_url, rabbit_url, request.getfixturevalue("queue_name"))
