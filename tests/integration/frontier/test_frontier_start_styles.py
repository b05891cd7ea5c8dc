"""Every way a Scrapy spider can start crawls on the frontier, alone and with two workers.

Regression tests for "a spider that defines start_requests() crawls nothing": on Scrapy 2.19 the
engine no longer calls ``start_requests()``, and the frontier's idle rule then closed the crawl
within milliseconds. Each style is a real crawl of the loopback link graph by worker subprocesses
(tests/support/frontier_crawl.py); the site counts every hit, so "every page exactly once" is
checked at the source.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
import redis
from support.crawl import Site, Worker, frontier_settings, start_together

STYLES = ["start_urls", "start_urls_many", "start_requests", "start_mixed", "crawlspider", "seeded"]


def _seed(redis_url: str, url: str) -> None:
    """``crawlfleet seed site URL``, as an operator runs it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "crawlfleet.cli",
            "seed",
            "site",
            url,
            "--redis-url",
            redis_url,
            "--new",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker", "two-workers"])
@pytest.mark.parametrize("style", STYLES)
def test_every_start_style_crawls_every_page_once(
    site: Site,
    redis_url: str,
    start_worker: Callable[..., Worker],
    style: str,
    workers: int,
) -> None:
    # "hundreds" of start requests for the classic start_requests(); the others follow links
    site.pages = 300 if style == "start_requests" else 60
    if style == "seeded":
        _seed(redis_url, f"{site.url}/p/0")
    settings = frontier_settings(redis_url)
    names = [f"w{i}" for i in range(workers)]
    started = start_together(start_worker, site, settings, names, style=style, pages=site.pages)
    client = redis.Redis.from_url(redis_url)
    for worker in started:
        assert worker.wait() == 0, worker.log.read_text()[-3000:]
    summaries = [worker.summary() for worker in started]
    assert [s["reason"] for s in summaries] == ["finished"] * workers
    assert site.crawled() == site.expected(), sorted(site.expected() - site.crawled())[:10]
    assert all(site.hits[p] == 1 for p in site.expected()), {
        p: n for p, n in site.hits.items() if n != 1
    }
    parsed = sorted(path for worker in started for path in worker.parsed())
    assert parsed == sorted(site.expected())
    stats = [s["stats"] for s in summaries]
    assert isinstance(stats[0], dict)
    if style == "start_mixed":
        # the start items are part of the seeding: kept once for the whole crawl
        assert sum(int(s.get("item_scraped_count", 0)) for s in stats) == 3  # type: ignore[union-attr]
        if workers == 2:
            skipped = sorted(int(s.get("scheduler/start_items_skipped", 0)) for s in stats)  # type: ignore[union-attr]
            assert skipped == [0, 3]
    assert client.zcard("site:workers") == 0
    assert not list(client.scan_iter("site:leases:*"))
    assert client.exists("site:requests") == 0
    assert client.exists("site:start_urls") == 0


def test_classic_start_requests_spider_from_the_issue(
    site: Site, redis_url: str, start_worker: Callable[..., Worker]
) -> None:
    """The issue's reproduction: 30 requests from start_requests(), 30 pages parsed, not 0."""
    site.pages, site.branching = 30, 1
    worker = start_worker(
        site.url, frontier_settings(redis_url), style="start_requests", pages=site.pages
    )
    assert worker.wait() == 0
    assert worker.summary()["reason"] == "finished"
    assert len(worker.parsed()) == 30
    assert "runs start_requests() as its start" in worker.log.read_text()
