"""Crawl workers (subprocesses) on the RabbitMQ queue with the Redis dupefilter.

The tests both backends share (SIGKILL, SIGTERM) run on RabbitMQ too, from test_frontier_crawl.py
through the ``backend`` fixture; these are the RabbitMQ backend's own.
"""

from __future__ import annotations

import json

import msgpack
import pika
import pytest
import redis
from rabbitmq_server import RabbitServer
from scrapy import Request
from support.backends import assert_rabbitmq_drained, rabbitmq_settings
from support.crawl import Site
from support.waiting import wait_until


def test_two_workers_crawl_every_page_exactly_once(
    site: Site, redis_url: str, rabbit_url: str, queue_name: str, start_worker
) -> None:
    site.pages = 60
    config = rabbitmq_settings(redis_url, rabbit_url, queue_name)
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
    assert_rabbitmq_drained(redis_url, rabbit_url, queue_name)


@pytest.mark.parametrize("style", ["start_requests", "crawlspider", "start_mixed"])
def test_classic_start_styles_crawl_on_rabbitmq(
    site: Site, redis_url: str, rabbit_url: str, queue_name: str, start_worker, style: str
) -> None:
    """The start styles of the Redis backend's tests, two workers together, on the broker."""
    site.pages = 120
    config = rabbitmq_settings(redis_url, rabbit_url, queue_name)
    workers = [start_worker(site.url, config, name, style=style, pages=site.pages) for name in "ab"]
    for worker in workers:
        assert worker.wait() == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert all(site.hits[p] == 1 for p in site.expected()), site.hits
    summaries = [w.summary() for w in workers]
    assert {s["reason"] for s in summaries} == {"finished"}
    if style == "start_mixed":
        assert sum(int(s["stats"].get("item_scraped_count", 0)) for s in summaries) == 3
    assert_rabbitmq_drained(redis_url, rabbit_url, queue_name)


def test_broker_restart_mid_crawl_loses_nothing(
    site: Site,
    redis_url: str,
    rabbit: RabbitServer,
    rabbit_url: str,
    queue_name: str,
    start_worker,
) -> None:
    site.pages, site.delay = 50, 0.1
    worker = start_worker(site.url, rabbitmq_settings(redis_url, rabbit_url, queue_name))
    wait_until(lambda: len(worker.parsed()) >= 8, what="the crawl to get going")
    rabbit.stop()
    wait_until(lambda: "unreachable" in worker.log.read_text(), what="the worker to notice")
    assert worker.proc.poll() is None  # the worker waits for the broker, it does not die
    rabbit.start()
    assert worker.wait(timeout=120) == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    summary = worker.summary()
    assert summary["reason"] == "finished"
    assert "unreachable" in worker.log.read_text()
    assert_rabbitmq_drained(redis_url, rabbit_url, queue_name)


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
    worker = start_worker(site.url, rabbitmq_settings(redis_url, rabbit_url, queue_name))
    assert worker.wait() == 0, worker.log.read_text()[-3000:]
    assert site.hits["/orphan"] == 1
    assert site.crawled() == site.expected()
    stats = worker.summary()["stats"]
    assert stats["scheduler/republished"] == 1
    # /orphan answers 404: a final failure, recorded for `crawlfleet requeue-failed`
    failed = [json.loads(e) for e in client.lrange("site:failed", 0, -1)]
    assert [f["url"] for f in failed] == [site.url + "/orphan"]
    assert_rabbitmq_drained(redis_url, rabbit_url, queue_name)


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
    config = rabbitmq_settings(
        redis_url, rabbit_url, queue_name, RABBITMQ_CONNECT_TIMEOUT=3, **extra
    )
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
