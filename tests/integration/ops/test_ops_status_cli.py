"""`crawlfleet status` against a real Redis during a real two-worker frontier crawl."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from ops_helpers import (
    assert_one_line_error,
    cli,
    cli_process,
    crawl_settings,
)
from support.net import free_port
from support.waiting import wait_until

from crawlfleet.views.crawl import spider_snapshot

import redis_server

SPIDER = "site"


def _view(redis_url: str) -> dict:
    result = cli("status", SPIDER, "--json", "--redis-url", redis_url)
    assert result.code == 0, result.err
    view = result.json()
    assert view["schema"] == 1
    (spider,) = view["spiders"]
    return spider


def test_status_follows_a_two_worker_crawl(site, redis_url: str, start_worker) -> None:
    # About 12 s of crawling: long enough for the CLI calls made during it.
    site.pages, site.delay = 160, 0.25
    settings = crawl_settings(redis_url)
    workers = [start_worker(site.url, settings, name) for name in ("one", "two")]
    client = redis.Redis.from_url(redis_url)
    wait_until(
        lambda: (
            all(len(w.parsed()) >= 3 for w in workers)
            and client.zcard(f"{SPIDER}:ops:workers") == 2
        ),
        what="both workers to crawl and report",
    )

    def rates_known() -> bool:
        view = spider_snapshot(client, SPIDER)
        return sum(1 for w in view["workers"] if (w["pages_per_minute"] or 0) > 0) == 2

    wait_until(rates_known, timeout=30, what="a pages/min rate for both workers")
    view = _view(redis_url)
    assert view["spider"] == SPIDER and view["paused"] is False
    assert view["workers_alive"] == 2
    assert len(view["workers"]) == 2
    for w in view["workers"]:
        assert w["alive"] and w["registered"]
        assert 0 <= w["heartbeat_age"] < 3
        assert w["host"] and isinstance(w["pid"], int)
    assert view["queue_class"] == "PriorityQueue" and view["shards"] == 1
    assert view["pages_per_minute"] > 0
    assert view["dupefilter"]["class"] == "SetDupeFilter"
    assert view["dupefilter"]["fingerprints"] > 0
    assert view["acked"] + view["queued"] + view["leased"] <= site.pages + 1

    # A purge while workers are alive is refused and deletes nothing.
    refused = cli("purge", SPIDER, "--yes", "--redis-url", redis_url)
    assert_one_line_error(refused, 1, "alive", "--force")
    assert client.exists(f"{SPIDER}:frontier")

    human = cli_process("status", "--redis-url", redis_url)
    assert human.code == 0, human.err
    assert "site" in human.out and "alive" in human.out
    for w in view["workers"]:
        assert w["id"] in human.out

    for w in workers:
        assert w.wait() == 0
    final = _view(redis_url)
    assert final["acked"] == site.pages
    assert final["queued"] == 0 and final["leased"] == 0
    assert final["workers_alive"] == 0
    assert {w["stopped"] for w in final["workers"]} == {True}
    assert sum(w["acked"] for w in final["workers"]) == site.pages
    pages_seen = sum(w["pages"] for w in final["workers"])
    assert pages_seen == site.pages


def test_status_watch_draws_a_table(site, redis_url: str, start_worker) -> None:
    site.pages = 10
    bloom = crawl_settings(
        redis_url,
        DUPEFILTER_CLASS="crawlfleet.frontier.dupefilter.BloomDupeFilter",
        BLOOMFILTER_CAPACITY=10_000,
        BLOOMFILTER_ERROR_RATE=0.001,
    )
    assert start_worker(site.url, bloom).wait() == 0
    redis.Redis.from_url(redis_url).set(f"{SPIDER}:total", 20)
    result = cli("status", "--watch", "--count", "2", "--interval", "0.1", "--redis-url", redis_url)
    assert result.code == 0, result.err
    assert "acknowledged" in result.out and "progress" in result.out
    watched = cli(
        "status", "--watch", "--count", "2", "--interval", "0.1", "--json", "--redis-url", redis_url
    )
    assert watched.code == 0, watched.err
    snapshots = [json.loads(line) for line in watched.out.strip().splitlines()]
    assert len(snapshots) == 2
    spider = snapshots[-1]["spiders"][0]
    assert spider["total"] == 20
    df = spider["dupefilter"]
    assert (df["class"], df["key"], df["capacity"]) == (
        "BloomDupeFilter",
        "site:bloomfilter",
        10_000,
    )
    assert df["fingerprints"] == site.pages - 1  # the start page is dont_filter
    assert 0 < df["fill_ratio"] < 0.01 and 0 <= df["error_rate"] < df["design_error_rate"]
    assert "est. false positives" in result.out


def test_status_errors_are_one_line(redis_url: str, tmp_path: Path) -> None:
    # In a real process once: exit status, one line on stderr, no traceback.
    unknown = cli_process("status", "nosuch", "--redis-url", redis_url)
    assert_one_line_error(unknown, 1, "no crawl named 'nosuch'")

    down = f"redis://127.0.0.1:{free_port()}/0"
    assert_one_line_error(cli("status", "--redis-url", down), 1, "cannot reach Redis")

    server = redis_server.start_redis(tmp_path, password="right")
    try:
        wrong = f"redis://:wrong@127.0.0.1:{server.port}/0"
        result = cli("status", "--redis-url", wrong)
        assert_one_line_error(result, 1, "password", "***")
        assert "wrong" not in result.err
    finally:
        server.stop()

    assert_one_line_error(cli("status"), 2, "no Redis URL")
    bad = cli("status", "--interval", "0", "--watch", "--redis-url", redis_url)
    assert_one_line_error(bad, 2, "--interval")
    usage = cli("status", "--interval", "soon")
    assert usage.code == 2 and "invalid float value" in usage.err


def test_status_of_an_empty_redis_lists_no_crawl(redis_url: str) -> None:
    result = cli("status", "--json", "--redis-url", redis_url)
    assert result.code == 0, result.err
    assert result.json()["spiders"] == []
    assert "no crawls found" in cli("status", "--redis-url", redis_url).out
