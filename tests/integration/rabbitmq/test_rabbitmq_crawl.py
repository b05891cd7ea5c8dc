"""Crawl workers (subprocesses) on the RabbitMQ queue with the Redis dupefilter."""

from __future__ import annotations

import json
import signal
import time

import msgpack
import pika
import pytest
import redis
from frontier_support import Site, frontier_settings, wait_until
from rabbitmq_server import RabbitServer
from scrapy import Request

QUEUE_CLASS = "crawlfleet.frontier.rabbitmq.PriorityQueue"


def settings(redis_url: str, rabbit_url: str, queue: str, **extra: object) -> dict[str, object]:
    options: dict[str, object] = {
        "SCHEDULER_QUEUE_CLASS": QUEUE_CLASS,
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


def assert_drained(redis_url: str, rabbit_url: str, queue: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.zcard("site:rabbitmq:workers") == 0
    assert not list(client.scan_iter("site:rabbitmq:outbox:*"))
    assert ready_messages(rabbit_url, queue) == 0


def test_two_workers_crawl_every_page_exactly_once(
    site: Site, redis_url: str, rabbit_url: str, queue_name: str, start_worker
) -> None:
    site.pages = 60
    config = settings(redis_url, rabbit_url, queue_name)
    workers = [start_worker(site.url, config, "a"), start_worker(site.url, config, "b")]
    for worker in workers:
        assert worker.wait() == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1
    parsed = workers[0].parsed() + workers[1].parsed()
    assert sorted(parsed) == sorted(site.expected())
    summaries = [w.summary() for w in workers]
    assert {s["reason"] for s in summaries} == {"finished"}
    assert sum(int(s["stats"].get("scheduler/acked", 0)) for s in summaries) == site.pages
    assert sum(1 for s in summaries if s["stats"].get("scheduler/start_skipped")) == 1
    assert_drained(redis_url, rabbit_url, queue_name)


@pytest.mark.parametrize("style", ["start_requests", "crawlspider", "start_mixed"])
def test_classic_start_styles_crawl_on_rabbitmq(
    site: Site, redis_url: str, rabbit_url: str, queue_name: str, start_worker, style: str
) -> None:
    """The start styles of the Redis backend's tests, two workers together, on the broker."""
    site.pages = 120
    config = settings(redis_url, rabbit_url, queue_name)
    workers = [start_worker(site.url, config, name, style=style, pages=site.pages) for name in "ab"]
    for worker in workers:
        assert worker.wait() == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert all(site.hits[p] == 1 for p in site.expected()), site.hits
    summaries = [w.summary() for w in workers]
    assert {s["reason"] for s in summaries} == {"finished"}
    if style == "start_mixed":
        assert sum(int(s["stats"].get("item_scraped_count", 0)) for s in summaries) == 3
    assert_drained(redis_url, rabbit_url, queue_name)


def test_sigkill_of_one_worker_loses_no_page(
    site: Site, redis_url: str, rabbit_url: str, queue_name: str, start_worker
) -> None:
    site.pages, site.delay = 60, 0.2
    config = settings(redis_url, rabbit_url, queue_name, CONCURRENT_REQUESTS=2)
    victim = start_worker(site.url, config, "victim")
    survivor = start_worker(site.url, config, "survivor")
    wait_until(
        lambda: len(victim.parsed()) >= 3 and len(survivor.parsed()) >= 3,
        what="both workers to crawl",
    )
    victim.proc.send_signal(signal.SIGKILL)
    victim.wait()
    assert survivor.wait() == 0, survivor.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert survivor.summary()["reason"] == "finished"
    assert_drained(redis_url, rabbit_url, queue_name)


def test_sigterm_then_restart_crawls_exactly_the_rest(
    site: Site, redis_url: str, rabbit_url: str, queue_name: str, start_worker
) -> None:
    site.pages, site.delay = 60, 0.1
    config = settings(redis_url, rabbit_url, queue_name)
    first = start_worker(site.url, config, "first")
    wait_until(lambda: len(first.parsed()) >= 10, what="the crawl to get going")
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait() == 0
    assert first.summary()["reason"] == "shutdown"
    assert site.crawled() != site.expected()
    second = start_worker(site.url, config, "second")
    assert second.wait() == 0, second.log.read_text()[-3000:]
    assert second.summary()["stats"].get("scheduler/start_skipped") == 1
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1
    assert sorted(first.parsed() + second.parsed()) == sorted(site.expected())
    assert_drained(redis_url, rabbit_url, queue_name)


def test_broker_restart_mid_crawl_loses_nothing(
    site: Site,
    redis_url: str,
    rabbit: RabbitServer,
    rabbit_url: str,
    queue_name: str,
    start_worker,
) -> None:
    site.pages, site.delay = 50, 0.1
    worker = start_worker(site.url, settings(redis_url, rabbit_url, queue_name))
    wait_until(lambda: len(worker.parsed()) >= 8, what="the crawl to get going")
    rabbit.stop()
    time.sleep(1.0)
    assert worker.proc.poll() is None  # the worker waits for the broker, it does not die
    rabbit.start()
    assert worker.wait(timeout=120) == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    summary = worker.summary()
    assert summary["reason"] == "finished"
    assert "unreachable" in worker.log.read_text()
    assert_drained(redis_url, rabbit_url, queue_name)


def test_outbox_of_a_dead_worker_is_published_by_the_next_one(
    site: Site, redis_url: str, rabbit_url: str, queue_name: str, start_worker
) -> None:
    # A worker died after the duplicate check recorded a request in its outbox and before the
    # broker committed the publish: the next worker to sync publishes it.
    site.pages = 10
    client = redis.Redis.from_url(redis_url)
    orphan = Request(site.url + "/orphan", dont_filter=True).to_dict()
    client.zadd("site:rabbitmq:workers", {"dead-worker": 0})
    client.hset(
        "site:rabbitmq:outbox:dead-worker",
        "dead-worker:1",
        b"0|" + msgpack.packb(orphan, use_bin_type=True),
    )
    worker = start_worker(site.url, settings(redis_url, rabbit_url, queue_name))
    assert worker.wait() == 0, worker.log.read_text()[-3000:]
    assert site.hits["/orphan"] == 1
    assert site.crawled() == site.expected()
    stats = worker.summary()["stats"]
    assert stats["scheduler/republished"] == 1
    # /orphan answers 404: a final failure, recorded for `crawlfleet requeue-failed`
    failed = [json.loads(e) for e in client.lrange("site:failed", 0, -1)]
    assert [f["url"] for f in failed] == [site.url + "/orphan"]
    assert_drained(redis_url, rabbit_url, queue_name)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            {"SCHEDULER_QUEUE_MAX_PRIORITY": 10},
            "exists with another declaration",
        ),
        ({"RABBITMQ_URL": "amqp://guest:guest@127.0.0.1:1/%2F"}, "cannot reach RabbitMQ at"),
        ({"RABBITMQ_URL": "http://hub:5672/"}, "RABBITMQ_URL must look like amqp://"),
    ],
    ids=["changed-declaration", "unreachable", "bad-url"],
)
def test_worker_refuses_to_start_with_one_line(
    site: Site,
    redis_url: str,
    rabbit_url: str,
    queue_name: str,
    start_worker,
    extra: dict[str, object],
    expected: str,
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    connection.channel().queue_declare(queue_name, durable=True, arguments={"x-max-priority": 100})
    connection.close()
    config = settings(redis_url, rabbit_url, queue_name, RABBITMQ_CONNECT_TIMEOUT=3, **extra)
    worker = start_worker(site.url, config)
    assert worker.wait() == 1
    lines = [
        line for line in worker.log.read_text().splitlines() if "Frontier cannot start" in line
    ]
    assert len(lines) == 1 and expected in lines[0], worker.log.read_text()[-2000:]
    assert "CRITICAL" in lines[0]
    if "declaration" in expected:
        assert "SCHEDULER_FLUSH_ON_START" in lines[0] and "delete" in lines[0]
    assert not site.hits
