"""``SCHEDULER_WAIT_REPLICAS`` unset means the replicas that exist, counted at start.

A Redis Cluster without replicas (the layout ``crawlfleet_redis_cluster_replicas: 0`` builds) once
made every enqueue fail for ever ("0 of the 1 replica(s) …"): with nothing set, a crawl on it now
ends with every page through a worker's SIGKILL, and each worker said once at start that its
enqueues do not wait. On the six-node cluster the same default waits for one replica; a number
the project sets stays a requirement, said once at start when fewer replicas are online.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler
from support.cli import cli
from support.crawl import Site, frontier_settings, start_two
from support.lifecycle import running
from support.rediscluster import RedisClusterGroup, start_redis_cluster

from crawlfleet.frontier.scheduler import Scheduler

NO_REPLICA = "has no replica online; enqueues do not wait"


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterGroup]:
    """Three primaries, no replica."""
    yield from running(start_redis_cluster(tmp_path_factory.mktemp("bare"), replicas=0))


def scheduler_on(url: str, **extra: object) -> Scheduler:
    settings = frontier_settings(url, SCHEDULER_WAIT_TIMEOUT=0.2, **extra)
    crawler = get_crawler(type("Waits", (Spider,), {"name": "site"}), settings)
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler


def test_unset_on_a_cluster_without_replicas_does_not_wait_and_says_so_once(
    bare_cluster: RedisClusterGroup, caplog: pytest.LogCaptureFixture
) -> None:
    bare_cluster.flush()
    with caplog.at_level(logging.WARNING):
        scheduler = scheduler_on(bare_cluster.url())
        try:
            for n in range(5):
                assert scheduler.enqueue_request(Request(f"https://a.test/{n}"))
            assert not scheduler._pending  # each enqueue acknowledged: nothing kept back
            assert scheduler.config.wait_replicas == 0
            assert scheduler.client.zcard("{site}:requests") == 5
        finally:
            scheduler.close("finished")
    said = [r.getMessage() for r in caplog.records if NO_REPLICA in r.getMessage()]
    assert len(said) == 1, said
    # the line names the primary holding the crawl and the setting that requires a replica
    owner = bare_cluster.slot_owner("{site}")
    assert f":{owner}" in said[0] and "SCHEDULER_WAIT_REPLICAS=1" in said[0]
    assert not [r for r in caplog.records if "replica(s) SCHEDULER_WAIT_REPLICAS" in r.message]


def test_unset_with_replicas_waits_for_one_and_a_set_number_stays_a_requirement(
    cluster: RedisClusterGroup, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = scheduler_on(cluster.url())
    try:
        assert scheduler.config.wait_replicas == 1
        assert scheduler.enqueue_request(Request("https://a.test/1"))
        assert not scheduler._pending
    finally:
        scheduler.close("finished")
    assert NO_REPLICA not in caplog.text
    with caplog.at_level(logging.WARNING):
        scheduler = scheduler_on(cluster.url(), SCHEDULER_WAIT_REPLICAS=2)  # one per primary
        try:
            assert scheduler.config.wait_replicas == 2
            scheduler.enqueue_request(Request("https://a.test/2"))
            assert scheduler._pending  # kept and sent again, never dropped
            # the operator sees why the worker holds its requests back, since when
            view = cli("status", "site", "--json", "--redis-url", cluster.url()).json()
            (row,) = [w for w in view["spiders"][0]["workers"] if w["id"] == scheduler.worker]
            assert row["waiting"].startswith("replicas: 1 of the 2 replica(s)")
            assert 0 <= row["waiting_for"] < 60
            text = cli("status", "site", "--redis-url", cluster.url()).out
            assert "waiting" in text and "replicas: 1 of the 2 replica(s)" in text
            scheduler.config.wait_replicas = 1
            assert scheduler._flush_pending() is not None and not scheduler._pending
            view = cli("status", "site", "--json", "--redis-url", cluster.url()).json()
            (row,) = [w for w in view["spiders"][0]["workers"] if w["id"] == scheduler.worker]
            assert row["waiting"] is None and row["waiting_for"] is None
        finally:
            scheduler.close("finished")
    assert "SCHEDULER_WAIT_REPLICAS=2: the primary holding this crawl" in caplog.text
    assert "has 1 replica(s) online" in caplog.text


@pytest.mark.parametrize("bad", ["-1", "one", "1.5", True])
def test_a_bad_number_is_one_line_at_start(bare_cluster: RedisClusterGroup, bad: object) -> None:
    with pytest.raises(Exception, match=r"^SCHEDULER_WAIT_REPLICAS must be a whole number"):
        scheduler_on(bare_cluster.url(), SCHEDULER_WAIT_REPLICAS=bad)


def test_a_crawl_with_nothing_set_survives_a_sigkill_without_replicas(
    site: Site, start_worker, bare_cluster: RedisClusterGroup
) -> None:
    bare_cluster.flush()
    site.pages, site.delay = 60, 0.2
    settings = frontier_settings(bare_cluster.url(), CONCURRENT_REQUESTS=2)
    victim, survivor = start_two(start_worker, site, settings)
    victim.proc.send_signal(signal.SIGKILL)
    victim.wait()
    assert survivor.wait(120) == 0, survivor.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert survivor.summary()["reason"] == "finished"
    for worker in (victim, survivor):
        log = worker.log.read_text()
        assert log.count(NO_REPLICA) == 1, log[-3000:]
        assert "replica(s) SCHEDULER_WAIT_REPLICAS asks for" not in log
