"""The project and release a worker runs, from its environment to `crawlfleet status`: the worker
stats extension stamps the frontier's worker record, the crawl view reads it (one read model for the
CLI and the dashboard)."""

from __future__ import annotations

import json

import pytest
import redis
from scrapy.utils.test import get_crawler

from crawlfleet.extensions.workerstats import WorkerStats
from crawlfleet.views.crawl import spider_snapshot

WORKER = "b:101:0f3a"


def stats_of(redis_url: str) -> WorkerStats:
    ext = WorkerStats.from_crawler(get_crawler(settings_dict={"REDIS_URL": redis_url}))
    ext.worker, ext.spider = WORKER, "pages"
    return ext


def register(client: redis.Redis) -> None:
    """What the frontier's claim writes for a worker: its record and its lease deadline."""
    now_ms = int(client.time()[0]) * 1000
    client.hset(f"pages:worker:{WORKER}", mapping={"info": json.dumps({"host": "b", "pid": 101})})
    client.zadd("pages:workers", {WORKER: now_ms + 60_000})


def test_a_worker_publishes_its_project_and_release(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAWLFLEET_PROJECT", "linkcrawler")
    monkeypatch.setenv("CRAWLFLEET_PROJECT_VERSION", "3f1c2a9e0b7d4c11")
    ext = stats_of(redis_url)
    register(redis_client)
    assert ext.write()
    [row] = spider_snapshot(redis_client, "pages")["workers"]
    assert (row["host"], row["alive"]) == ("b", True)
    assert (row["project"], row["version"]) == ("linkcrawler", "3f1c2a9e0b7d4c11")


def test_a_worker_run_by_hand_has_no_release(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRAWLFLEET_PROJECT", raising=False)
    monkeypatch.delenv("CRAWLFLEET_PROJECT_VERSION", raising=False)
    register(redis_client)
    assert stats_of(redis_url).write()
    [row] = spider_snapshot(redis_client, "pages")["workers"]
    assert (row["project"], row["version"]) == (None, None)


def test_no_worker_record_is_made_up(redis_url: str, redis_client: redis.Redis) -> None:
    # Before the frontier registered the worker (or after its record expired) nothing is written.
    assert stats_of(redis_url).write()
    assert not redis_client.exists(f"pages:worker:{WORKER}")
