"""crawlfleet.frontier.rabbitmq.PriorityQueue against a real broker: order, acks, errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pika
import pytest
from scrapy.settings import Settings
from support.waiting import wait_until

from crawlfleet.frontier.rabbitmq import BrokerConfigError, PriorityQueue
from crawlfleet.frontier.rabbitmq.client import Delivery

ROOT = Path(__file__).resolve().parents[3]


def make_queue(url: str, name: str, consume: bool = True, **settings: object) -> PriorityQueue:
    queue = PriorityQueue.from_settings(
        Settings({"RABBITMQ_URL": url, **settings}), name, prefetch=10, consume=consume
    )
    queue.open()
    return queue


def committed(queue: PriorityQueue) -> None:
    wait_until(lambda: queue.client.pending() == 0, "the broker to confirm", 10, 0.01)


def take(queue: PriorityQueue, n: int, timeout: float = 10) -> list[Delivery]:
    """``n`` deliveries, in the order the queue hands them out."""
    got: list[Delivery] = []

    def enough() -> bool:
        while len(got) < n and (delivery := queue.pop()) is not None:
            got.append(delivery)
        return len(got) == n

    wait_until(enough, f"{n} deliveries", timeout, 0.01)
    return got


def test_priority_order_and_length(rabbit_url: str, queue_name: str) -> None:
    producer = make_queue(rabbit_url, queue_name, consume=False)
    for body, priority in [("low", -5), ("a", 3), ("top", 500), ("b", 3), ("zero", 0)]:
        producer.push(body.encode(), priority)
    committed(producer)
    assert len(producer) == 5
    producer.close()
    consumer = make_queue(rabbit_url, queue_name)
    got = take(consumer, 5)
    # clamped to 0 … 100, higher first, FIFO among equals
    assert [(d.body.decode(), d.priority) for d in got] == [
        ("top", 100),
        ("a", 3),
        ("b", 3),
        ("low", 0),
        ("zero", 0),
    ]
    for delivery in got:
        consumer.ack(delivery)
    committed(consumer)
    assert len(consumer) == 0
    consumer.close()


def test_priority_offset_shifts_negative_priorities(rabbit_url: str, queue_name: str) -> None:
    producer = make_queue(rabbit_url, queue_name, consume=False, SCHEDULER_QUEUE_PRIORITY_OFFSET=10)
    producer.push(b"deep", -8)
    producer.push(b"deeper", -9)
    committed(producer)
    producer.close()
    consumer = make_queue(rabbit_url, queue_name, SCHEDULER_QUEUE_PRIORITY_OFFSET=10)
    assert [(d.body, d.priority) for d in take(consumer, 2)] == [(b"deep", 2), (b"deeper", 1)]
    consumer.close()


def test_unacked_messages_of_a_killed_consumer_are_redelivered(
    rabbit_url: str, queue_name: str
) -> None:
    producer = make_queue(rabbit_url, queue_name, consume=False)
    for i in range(6):
        producer.push(f"m{i}".encode(), 0)
    committed(producer)
    victim = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("rabbitmq_consumer.py")),
            rabbit_url,
            queue_name,
            "4",
        ],
        stdout=subprocess.PIPE,
        env={"PYTHONPATH": str(ROOT / "project"), "PATH": "/usr/bin:/bin"},
    )
    assert victim.stdout is not None
    taken = [victim.stdout.readline().decode().strip() for _ in range(4)]
    assert taken == ["m0", "m1", "m2", "m3"]
    victim.kill()  # SIGKILL: no chance to ack or close
    victim.wait()
    consumer = make_queue(rabbit_url, queue_name)
    got = take(consumer, 6)
    assert sorted(d.body.decode() for d in got) == [f"m{i}" for i in range(6)]
    assert {d.body.decode() for d in got if d.redelivered} == set(taken)
    consumer.close()
    producer.close()


def test_changed_declaration_is_a_one_line_error(rabbit_url: str, queue_name: str) -> None:
    make_queue(rabbit_url, queue_name, SCHEDULER_QUEUE_MAX_PRIORITY=10).close()
    with pytest.raises(BrokerConfigError) as info:
        make_queue(rabbit_url, queue_name)
    message = str(info.value)
    assert "\n" not in message
    assert "x-max-priority" in message and queue_name in message
    assert "delete it" in message and "SCHEDULER_FLUSH_ON_START" in message
    # the fix the message names works: a flush re-declares the queue with the new arguments
    queue = PriorityQueue.from_settings(
        Settings({"RABBITMQ_URL": rabbit_url}), queue_name, prefetch=1, flush=True
    )
    queue.open()
    queue.close()
    make_queue(rabbit_url, queue_name).close()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:5672/", "must look like amqp://"),
        ("amqp://guest:guest@127.0.0.1:1/%2F", "cannot reach RabbitMQ at"),
        ("amqp://guest:wrong-secret@127.0.0.1:{port}/%2F", "refused the user or password"),
        ("amqp://guest:guest@127.0.0.1:{port}/nosuchvhost", "refused access to the vhost"),
    ],
    ids=["scheme", "unreachable", "password", "vhost"],
)
def test_bad_rabbitmq_url_is_a_one_line_error(
    rabbit_url: str, queue_name: str, url: str, expected: str
) -> None:
    port = pika.URLParameters(rabbit_url).port
    with pytest.raises(BrokerConfigError) as info:
        make_queue(url.format(port=port), queue_name, RABBITMQ_CONNECT_TIMEOUT=3)
    message = str(info.value)
    assert expected in message and "\n" not in message
    assert "wrong-secret" not in message
