"""A hub that reaches ``maxmemory`` mid-crawl: the crawl pauses, status says so, and it resumes.

A real two-worker crawl (with the per-worker statistics) on a private redis-server with
``noeviction``: ``maxmemory`` is set just above what Redis uses once some pages are done, the
workers' writes are refused with OOM, ``crawlfleet status`` (text and JSON) reports the hub full,
then ``maxmemory`` is lifted and the crawl finishes with every page crawled exactly once. And the
items pipeline keeps the items a full hub refuses, logging the episode once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

from ops_helpers import cli, crawl_settings
from scrapy import Spider
from scrapy.utils.test import get_crawler
from support.waiting import wait_until

from crawlfleet.pipelines import RedisItemsPipeline
from crawlfleet.views.hub import oom_refusals

SPIDER = "site"
# The frontier's lines (WorkerStats logs its own pair)
FULL_LINE = re.compile(r"Frontier worker \S+: the hub's Redis at \S+ is full \(maxmemory reached")
RESUME_LINE = re.compile(
    r"Frontier worker \S+: the hub has room again; resuming after ([\d.]+) s full "
    r"\((\d+) write\(s\) refused\)"
)
# Redis refuses this many writes before maxmemory is lifted: the workers retry, back off, live.
REFUSALS = 40


def test_a_full_hub_pauses_the_crawl_and_it_resumes_losing_nothing(
    site, own_redis, start_worker
) -> None:
    site.pages, site.delay = 150, 0.05
    # A 30 s lease timeout: the leases outlive the pause (heartbeats are refused too).
    settings = crawl_settings(
        own_redis.url, SCHEDULER_LEASE_TIMEOUT=30, SCHEDULER_HEARTBEAT_INTERVAL=0.5
    )
    workers = [start_worker(site.url, settings, name) for name in ("one", "two")]
    client = own_redis.client()
    assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    # both crawling before the hub fills: on a loaded machine one may still be starting
    wait_until(lambda: all(len(w.parsed()) >= 5 for w in workers), what="both workers crawling")

    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(used + 4096))
    full_at = time.monotonic()

    def refused() -> int:
        return oom_refusals(client.info("errorstats"))

    wait_until(lambda: refused() > 0, "Redis to refuse a worker's write with OOM", timeout=60)
    wait_until(
        lambda: all(FULL_LINE.search(w.log.read_text()) for w in workers),
        "both workers to log the full hub",
        timeout=60,
    )
    parsed = sum(len(w.parsed()) for w in workers)

    status = cli("status", "--json", "--redis-url", own_redis.url)
    assert status.code == 0, status.err
    hub = status.json()["hub"]
    assert hub["full"] is True
    assert hub["oom_refusals"] > 0
    assert hub["used_memory"] >= hub["maxmemory"] > 0
    text = cli("status", "--redis-url", own_redis.url)
    assert text.code == 0, text.err
    assert "hub FULL" in text.out
    assert "over its maxmemory" in text.out
    wait_until(lambda: refused() >= REFUSALS, f"{REFUSALS} OOM refusals", timeout=60)
    assert all(w.proc.poll() is None for w in workers), "a full hub must not end the crawl"
    # what the workers held when Redis refused them: in flight (2 each) and prefetched (2 each)
    held = sum(len(w.parsed()) for w in workers) - parsed
    assert held <= 2 * (2 + 2), f"{held} pages crawled while the hub was full"
    assert cli("status", "--json", "--redis-url", own_redis.url).json()["hub"]["full"] is True
    paused_for = time.monotonic() - full_at

    client.config_set("maxmemory", "0")
    for w in workers:
        assert w.wait() == 0
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1, "a page was crawled twice"
    assert int(client.hget(f"{SPIDER}:stats", "scheduler/requeued") or 0) == 0
    assert cli("status", "--json", "--redis-url", own_redis.url).json()["hub"]["full"] is False

    refusals = 0
    for w in workers:
        log = w.log.read_text()
        assert len(FULL_LINE.findall(log)) == 1, "one line per episode, not one per refusal"
        resumed = RESUME_LINE.findall(log)
        assert len(resumed) == 1, log[-2000:]
        refusals += int(w.summary()["stats"].get("scheduler/hub_full_refused", 0))
        assert "Traceback" not in log
        print(f"worker resumed after {resumed[0][0]} s full, {resumed[0][1]} writes refused")
    total = oom_refusals(client.info("errorstats"))
    print(
        f"full hub: {total} OOM refusals by Redis ({refusals} frontier round trips refused), "
        f"{paused_for:.1f} s from maxmemory set to lifted, {held} pages crawled while full "
        f"(held before), 0 pages crawled twice"
    )


def test_the_items_pipeline_keeps_what_a_full_hub_refuses(own_redis, caplog) -> None:
    crawler = get_crawler(Spider, {"REDIS_URL": own_redis.url, "ITEMS_BATCH_SIZE": 2})
    crawler.spider = Spider("site")
    pipeline = RedisItemsPipeline.from_crawler(crawler)
    pipeline.key = "site:items"  # what open_spider resolves (its ticker is not wanted here)
    client = own_redis.client()
    client.config_set("maxmemory", "1")  # full: every write that adds data is refused

    async def crawl() -> None:
        items = [asyncio.ensure_future(pipeline.process_item({"id": n})) for n in "abc"]
        await asyncio.sleep(0)  # each item is buffered (the first two were refused; the third
        # waits for the retry, not one round trip per item)
        assert not pipeline.flush()
        assert len(pipeline.buffer) == 3 and not any(t.done() for t in items)
        client.config_set("maxmemory", "0")
        assert pipeline.flush()
        await asyncio.gather(*items)

    with caplog.at_level(logging.WARNING, logger="crawlfleet.pipelines"):
        asyncio.run(crawl())
    assert [e[1][b"id"] for e in client.xrange("site:items")] == [b"a", b"b", b"c"]
    # Only the pipeline's: other tests of the session may have turned Scrapy's INFO lines on.
    lines = [r.getMessage() for r in caplog.records if r.name == "crawlfleet.pipelines"]
    assert len(lines) == 2, lines  # one episode: it started, it ended
    assert "is full (maxmemory reached: XADD to site:items refused with OOM)" in lines[0]
    assert "has room again" in lines[1]
    assert pipeline.stats.get_value("items/redis/refused_full") == 2 + 3
