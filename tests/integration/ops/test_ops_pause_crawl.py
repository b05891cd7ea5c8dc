"""`crawlfleet pause`/`resume` in a real two-worker crawl: work stops, leases live, it resumes."""

from __future__ import annotations

import redis
from ops_helpers import cli, crawl_settings
from support.crawl import wait_heartbeats
from support.waiting import wait_until

from crawlfleet.views.crawl import spider_snapshot

SPIDER = "site"


def test_pause_holds_the_crawl_and_resume_finishes_it(site, redis_url: str, start_worker) -> None:
    site.pages, site.delay = 120, 0.2
    # Lease timeout 3 s: a pause longer than that proves heartbeats keep the leases alive.
    settings = crawl_settings(
        redis_url, SCHEDULER_LEASE_TIMEOUT=3, SCHEDULER_HEARTBEAT_INTERVAL=0.5
    )
    workers = [start_worker(site.url, settings, name) for name in ("one", "two")]
    wait_until(lambda: all(len(w.parsed()) >= 3 for w in workers), what="both workers to crawl")

    client = redis.Redis.from_url(redis_url)
    assert cli("pause", SPIDER, "--redis-url", redis_url).code == 0
    wait_heartbeats(client, 1, workers=2)  # the flag arrives with the next heartbeat
    parsed = sum(len(w.parsed()) for w in workers)

    def settled() -> bool:  # the requests in flight when the flag arrived are done
        nonlocal parsed
        wait_heartbeats(client, 1, workers=2)
        before, parsed = parsed, sum(len(w.parsed()) for w in workers)
        return parsed == before

    wait_until(settled, "the requests in flight to finish")
    # Seven heartbeats of 0.5 s: longer than the 3 s lease timeout.
    wait_heartbeats(client, 7, workers=2)
    assert sum(len(w.parsed()) for w in workers) == parsed, "workers kept crawling while paused"
    view = spider_snapshot(client, SPIDER)
    assert view["paused"] is True
    assert view["workers_alive"] == 2
    assert view["queued"] > 0
    assert all(w.proc.poll() is None for w in workers), "a paused crawl is not finished"
    assert int(client.hget(f"{SPIDER}:stats", "scheduler/requeued") or 0) == 0

    assert cli("resume", SPIDER, "--redis-url", redis_url).code == 0
    for w in workers:
        assert w.wait() == 0
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1
    assert int(client.hget(f"{SPIDER}:stats", "scheduler/requeued") or 0) == 0
