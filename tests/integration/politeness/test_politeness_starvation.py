"""A slow site's backlog does not hold up a fast site (issue 16, item 2), in a real crawl: a
``scrapy crawl`` worker on a real redis-server, two sites on loopback addresses, site S at a low
per-site rate (``POLITENESS_SITES``) with all its pages queued first, site F at the default rate.

On the default queue with politeness on (``KeyedPriorityQueue``: a queue per site) the worker
takes F's pages while S's wait for their slots: F is done before S has had half of its pages
(however slowly a loaded machine crawls F, S gets one page a second meanwhile).
On the single ``PriorityQueue`` the head of the queue is all S, the worker's lookahead fills with
S's pages, and F waits until S's backlog is nearly through: the contrast case shows the starvation
the keyed queue removes. Both crawls finish with every page crawled once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis
from support.crawl import Worker, frontier_settings
from support.sites import QuietHandler, serve_http, url_of

SLOW_PAGES, FAST_PAGES = 24, 30
SLOW_RATE, FAST_RATE = 1.0, 20.0
PREFETCH = 2  # the lookahead is 4 x 2 requests
MIDDLEWARE = {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750}


class Hits:
    """The paths each site answered, counted (every page must be crawled exactly once)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paths: Counter[str] = Counter()

    def handler(self) -> type[QuietHandler]:
        hits = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                with hits.lock:
                    hits.paths[self.path] += 1
                self.reply(200, b"<html><body>a page</body></html>")

        return Handler


@pytest.fixture
def two_sites() -> Iterator[tuple[str, str, Hits]]:
    """(S's URL on 127.0.0.1, F's URL on 127.0.0.2, the hits of both)."""
    hits = Hits()
    with (
        serve_http(hits.handler(), host="127.0.0.1") as slow,
        serve_http(hits.handler(), host="127.0.0.2") as fast,
    ):
        yield url_of(slow), url_of(fast), hits


@pytest.mark.slow
@pytest.mark.parametrize("queue", ["default", "PriorityQueue"])
def test_a_slow_site_does_not_starve_a_fast_one(
    queue: str,
    redis_url: str,
    redis_client: redis.Redis,
    two_sites: tuple[str, str, Hits],
    start_worker: Callable[..., Worker],
) -> None:
    slow, fast, hits = two_sites
    slow_paths = [f"/s/{i}" for i in range(SLOW_PAGES)]
    fast_paths = [f"/f/{i}" for i in range(FAST_PAGES)]
    # S's pages first: on one priority queue (FIFO among equal priorities) all of them lead
    redis_client.rpush(
        "site:start_urls", *(slow + p for p in slow_paths), *(fast + p for p in fast_paths)
    )
    settings = frontier_settings(
        redis_url,
        DOWNLOADER_MIDDLEWARES=MIDDLEWARE,
        POLITENESS_RATE=FAST_RATE,
        POLITENESS_MAX_RATE=FAST_RATE,
        POLITENESS_SITES={"127.0.0.1": {"rate": SLOW_RATE, "max_rate": SLOW_RATE}},
        # every start URL reaches the queue in the first feed, in this order
        REDIS_START_URLS_BATCH_SIZE=SLOW_PAGES + FAST_PAGES,
        SCHEDULER_PREFETCH=PREFETCH,
        CONCURRENT_REQUESTS=8,
    )
    if queue != "default":
        settings["SCHEDULER_QUEUE_CLASS"] = f"crawlfleet.frontier.queues.{queue}"
    worker = start_worker(slow, settings, style="seeded")
    assert worker.wait(timeout=180) == 0, worker.log.read_text()[-3000:]
    assert worker.summary()["reason"] == "finished"

    # nothing lost, nothing twice
    assert hits.paths == Counter(slow_paths + fast_paths)
    parsed = worker.parsed()
    assert Counter(parsed) == Counter(slow_paths + fast_paths)
    # how many of S's pages had been crawled when F's last page was
    last_fast = max(i for i, path in enumerate(parsed) if path.startswith("/f/"))
    slow_before = sum(1 for path in parsed[:last_fast] if path.startswith("/s/"))
    frontier = redis_client.hgetall("site:frontier")
    if queue == "default":
        assert frontier[b"queue_class"] == b"crawlfleet.frontier.queues.KeyedPriorityQueue"
        # F at its own pace: S (1/s, burst 1) had a few slots meanwhile, not its backlog
        assert slow_before < SLOW_PAGES // 2, parsed
    else:
        assert frontier[b"queue_class"] == b"crawlfleet.frontier.queues.PriorityQueue"
        # F waited behind S's backlog: all of S but the worker's lookahead and what was in
        # flight went first
        assert slow_before >= SLOW_PAGES - 4 * PREFETCH - 2, parsed
