"""Worker subprocesses crawling through one frontier: SIGKILL, SIGTERM, seeding, idle.

The SIGKILL and SIGTERM tests are the backends' shared contract, run on Redis and on RabbitMQ
(the ``backend`` fixture, tests/support/backends.py); the rest are the Redis backend's own.
"""

from __future__ import annotations

import signal

import pytest
import redis
from support.backends import Backend, assert_redis_drained
from support.crawl import Site, frontier_settings, start_together, start_two
from support.waiting import wait_until

QUEUES = [
    "crawlfleet.frontier.queues.FifoQueue",
    "crawlfleet.frontier.queues.LifoQueue",
    "crawlfleet.frontier.queues.PriorityQueue",
]
# No SCHEDULER_QUEUE_CLASS, politeness on (at a rate that does not slow the crawl): the default,
# KeyedPriorityQueue
POLITE = "polite"
POLITE_SETTINGS: dict[str, object] = {
    "DOWNLOADER_MIDDLEWARES": {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750},
    "POLITENESS_RATE": 100,
    "POLITENESS_MAX_RATE": 100,
}


@pytest.mark.parametrize("batch", [False, True], ids=["unbatched", "batched"])
def test_one_worker_crawls_every_page_once(
    site: Site, redis_url: str, start_worker, batch: bool
) -> None:
    worker = start_worker(site.url, frontier_settings(redis_url, SCHEDULER_ENQUEUE_BATCH=batch))
    assert worker.wait() == 0
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1
    summary = worker.summary()
    assert summary["reason"] == "finished"
    stats = summary["stats"]
    assert stats["scheduler/dequeued/redis"] == site.pages
    assert stats["dupefilter/filtered"] > 0
    client = redis.Redis.from_url(redis_url)
    assert_redis_drained(client)
    totals = {k.decode(): int(v) for k, v in client.hgetall("site:stats").items()}
    assert totals["scheduler/acked"] == site.pages
    assert totals["scheduler/enqueued"] == site.pages
    assert client.scard("site:dupefilter") == site.pages - 1  # the start request is dont_filter


@pytest.mark.parametrize(
    ("backend", "queue_class", "batch"),
    [
        ("redis", QUEUES[0], False),
        ("redis", QUEUES[1], False),
        ("redis", QUEUES[2], False),
        ("redis", QUEUES[2], True),
        ("redis", POLITE, True),
        ("rabbitmq", None, False),
    ],
    ids=[
        "FifoQueue",
        "LifoQueue",
        "PriorityQueue",
        "PriorityQueue-batched",
        "KeyedPriorityQueue-polite",
        "rabbitmq",
    ],
    indirect=["backend"],
)
def test_sigkill_of_one_worker_loses_no_page(
    site: Site, backend: Backend, start_worker, queue_class: str | None, batch: bool
) -> None:
    site.pages, site.delay = 60, 0.2
    extra: dict[str, object] = {"CONCURRENT_REQUESTS": 2}
    if queue_class == POLITE:
        extra.update(POLITE_SETTINGS, SCHEDULER_ENQUEUE_BATCH=batch)
    elif queue_class is not None:  # RabbitMQ has one queue class, its own
        extra.update(SCHEDULER_QUEUE_CLASS=queue_class, SCHEDULER_ENQUEUE_BATCH=batch)
    settings = backend.settings(**extra)
    victim, survivor = start_two(start_worker, site, settings)
    victim.proc.send_signal(signal.SIGKILL)
    victim.wait()
    assert survivor.wait() == 0, survivor.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert survivor.summary()["reason"] == "finished"
    if backend.name == "redis":  # the victim's leases expired and went back to the queue
        client = redis.Redis.from_url(backend.redis_url)
        assert int(client.hget("site:stats", "scheduler/requeued") or 0) > 0
        if queue_class == POLITE:
            queue = client.hget("site:frontier", "queue_class")
            assert queue == b"crawlfleet.frontier.queues.KeyedPriorityQueue"
    backend.assert_drained()


@pytest.mark.parametrize("backend", ["redis", "rabbitmq"], indirect=True)
def test_sigterm_then_restart_crawls_exactly_the_rest(
    site: Site, backend: Backend, start_worker
) -> None:
    site.pages, site.delay = 60, 0.1
    # Leases far longer than the test: what comes back after SIGTERM was returned, not expired.
    settings = backend.settings(SCHEDULER_LEASE_TIMEOUT=60, SCHEDULER_HEARTBEAT_INTERVAL=5)
    first = start_worker(site.url, settings, "first")
    wait_until(lambda: len(first.parsed()) >= 10, what="the crawl to get going")
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait() == 0
    assert first.summary()["reason"] == "shutdown"
    client = redis.Redis.from_url(backend.redis_url)
    if backend.name == "redis":
        assert not list(client.scan_iter("site:leases:*")), "SIGTERM must return leases at once"
        assert client.zcard("site:requests") > 0
    done = len(site.crawled())
    assert done < site.pages
    second = start_worker(site.url, settings, "second")
    assert second.wait() == 0, second.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert all(site.hits[p] == 1 for p in site.expected()), site.hits
    assert second.summary()["stats"].get("scheduler/start_skipped") == 1
    assert sorted(first.parsed() + second.parsed()) == sorted(site.expected())
    backend.assert_drained()


def test_workers_started_together_seed_once(site: Site, redis_url: str, start_worker) -> None:
    settings = frontier_settings(redis_url)
    workers = start_together(start_worker, site, settings, ["a", "b"])
    for worker in workers:
        assert worker.wait() == 0
    assert site.hits["/p/0"] == 1
    assert site.crawled() == site.expected()
    skipped = sorted(w.summary()["stats"].get("scheduler/start_skipped", 0) for w in workers)
    assert skipped == [0, 1]


def test_idle_worker_waits_while_another_produces_links(
    site: Site, redis_url: str, start_worker
) -> None:
    # /p/* are done quickly; the /c/* chain then keeps exactly one request alive at a time,
    # leased by one worker, so the other sees an empty queue for several seconds.
    site.pages, site.chain, site.chain_delay = 4, 12, 0.3
    settings = frontier_settings(redis_url, SCHEDULER_IDLE_BEFORE_CLOSE=0)
    first = start_worker(site.url, settings, "a")
    wait_until(lambda: len(first.parsed()) >= 1, what="the first page")
    second = start_worker(site.url, settings, "b")
    wait_until(lambda: site.hits["/c/8"] >= 1, timeout=30, what="the chain to progress")
    assert first.proc.poll() is None and second.proc.poll() is None
    assert first.wait() == 0 and second.wait() == 0
    assert site.crawled() == site.expected()


def test_final_failure_goes_to_failed_list(site: Site, redis_url: str, start_worker) -> None:
    site.pages, site.broken_links = 4, 2
    worker = start_worker(site.url, frontier_settings(redis_url))
    assert worker.wait() == 0
    client = redis.Redis.from_url(redis_url)
    import json

    failed = [json.loads(e) for e in client.lrange("site:failed", 0, -1)]
    assert sorted(f["url"].rsplit("/", 2)[-2:][1] for f in failed) == ["0", "1"]
    assert all("HttpError" in f["reason"] for f in failed)
    assert int(client.hget("site:stats", "scheduler/failed")) == 2
    assert_redis_drained(client)


def test_redis_restart_mid_crawl_resumes(site: Site, own_redis, start_worker) -> None:
    site.pages, site.delay = 60, 0.1
    worker = start_worker(site.url, frontier_settings(own_redis.url, SCHEDULER_ENQUEUE_BATCH=True))
    wait_until(lambda: len(worker.parsed()) >= 10, what="10 pages")
    own_redis.stop()  # AOF on: what was written survives
    wait_until(lambda: "Frontier Redis" in worker.log.read_text(), what="the worker to notice")
    own_redis.start()
    assert worker.wait() == 0
    assert site.crawled() == site.expected()
    assert "Frontier Redis" in worker.log.read_text()  # it noticed, kept its work, went on
    assert_redis_drained(own_redis.client())


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("SCHEDULER_QUEUE_CLASS", "crawlfleet.frontier.queues.Nope", "SCHEDULER_QUEUE_CLASS"),
        ("SCHEDULER_SERIALIZER", "pickle", "SCHEDULER_SERIALIZER"),
        ("REDIS_URL", "redis://:secret@127.0.0.1:1/0", "redis://:***@127.0.0.1:1/0"),
    ],
)
def test_bad_configuration_stops_the_worker_with_one_line(
    site: Site, redis_url: str, start_worker, setting: str, value: str, expected: str
) -> None:
    worker = start_worker(site.url, frontier_settings(redis_url, **{setting: value}))
    assert worker.wait() == 1
    log = worker.log.read_text()
    critical = [line for line in log.splitlines() if "Frontier cannot start" in line]
    assert len(critical) == 1 and expected in critical[0], critical
    assert "secret" not in log  # masked everywhere, tracebacks included
    assert not site.hits
