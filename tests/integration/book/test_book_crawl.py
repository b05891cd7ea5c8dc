"""Whole crawls of a 300-book demo site with `scrapy crawl book` worker processes: the frontier
on a real Redis, three forward proxies with distinct loopback source addresses, the real pools.
The site and the pools are shared by the module's tests (``crawl_lab``); each test starts from
an empty frontier (``fresh_crawl``)."""

from __future__ import annotations

import time
from datetime import datetime

from book_lab import CRAWL_SETTINGS, Lab, export, wait_items, wait_workers
from support.waiting import wait_until

from crawlfleet.demosite.catalogue import Catalogue

BOOKS = 300
PAGES = BOOKS + 17  # detail pages + list pages of 18
PROXY_SOURCES = {"127.0.0.2", "127.0.0.3", "127.0.0.4"}
# A crawl slow enough (at most 80 pages/s with 50 ms latency) that the test can act meanwhile.
SLOW = ("CONCURRENT_REQUESTS=4",)


def assert_every_book_once(lab: Lab) -> None:
    items, message = export(lab.redis_url, lab.tmp / "books.jsonl")
    ids = [item["id"] for item in items]
    assert sorted(ids) == sorted(Catalogue(BOOKS, seed=7).ids)  # each book, exactly once
    assert message.startswith(f"wrote {BOOKS} items to ")
    assert all(item["name"] and item["isbn"] for item in items)


def total(stats: list[dict[str, object]], name: str) -> int:
    return sum(int(str(s.get(name, 0))) for s in stats)


def number(stats: dict[str, object], name: str) -> int:
    return int(str(stats.get(name, 0)))


def test_two_workers_crawl_300_books_through_three_proxies(fresh_crawl: Lab) -> None:
    lab = fresh_crawl
    started = time.monotonic()
    workers = [lab.start_worker(f"worker{i}", lab.worker_env, *CRAWL_SETTINGS) for i in (1, 2)]
    stats = wait_workers(workers)
    wall = time.monotonic() - started
    assert_every_book_once(lab)
    assert total(stats, "response_received_count") >= PAGES
    assert all(number(s, "response_received_count") > 0 for s in stats)  # both worked
    clients = lab.admin("/api/admin/stats")["book_requests"]
    assert isinstance(clients, dict)
    assert set(clients) == PROXY_SOURCES, clients  # only through proxies, through all three
    assert sum(clients.values()) >= PAGES
    assert total(stats, "proxy/pool/requests") < 60  # batches, not one call per request
    assert total(stats, "auth/pool/requests") < 10  # one cached token per worker
    # Crawl time: first worker opened to last worker closed, less the idle wait before closing.
    opened = min(datetime.fromisoformat(str(s["start_time"])) for s in stats)
    closed = max(datetime.fromisoformat(str(s["finish_time"])) for s in stats)
    crawl = (closed - opened).total_seconds() - 2
    print(
        f"\nbook crawl: {PAGES} pages by 2 workers in {crawl:.1f} s = {PAGES / crawl:.1f} pages/s "
        f"(wall time with process start-up {wall:.1f} s)"
    )


def test_a_banned_proxy_is_reported_and_the_request_retried_elsewhere(fresh_crawl: Lab) -> None:
    lab = fresh_crawl
    lab.admin("/api/admin/config", {"rate_limit": 20, "rate_window": 1, "ban_seconds": 1})
    # without the politeness pacer (with it, test_book_politeness: the pair cools down instead)
    worker = lab.start_worker(
        "banned", lab.worker_env, *CRAWL_SETTINGS, "PROXYPOOL_QUARANTINE=1", "POLITENESS_ENABLED=0"
    )
    stats = wait_workers([worker])[0]
    assert_every_book_once(lab)
    assert number(lab.admin("/api/admin/stats"), "bans") >= 1
    assert number(stats, "proxy/banned") >= 1
    assert number(stats, "proxy/report/banned") >= 1
    assert number(stats, "proxy/report/sent") + number(stats, "proxy/report/gone") >= 1
    assert number(stats, "proxy/retry/count") >= number(stats, "proxy/banned")
    assert "httperror/response_ignored_count" not in stats  # no ban reached the spider


def test_revoked_tokens_a_dead_proxy_and_stopped_pools_lose_nothing(fresh_crawl: Lab) -> None:
    lab = fresh_crawl
    lab.admin("/api/admin/config", {"latency_ms": 50})
    worker = lab.start_worker("revoked", lab.worker_env, *CRAWL_SETTINGS, *SLOW)
    # 1. The site revokes every token: requests get 401, tokens are reported and replaced.
    wait_items(lab.redis_url, 20)
    lab.admin("/api/admin/revoke", {"all": True})
    # 2. A proxy dies: connections to it are refused, it is reported and avoided.
    wait_items(lab.redis_url, 60)
    lab.proxy_services[2].stop()
    # 3. Both pools stop, and the tokens die while the account pool is down: the worker must
    # back off and wait for the pools to come back, sending nothing without a token meanwhile.
    wait_items(lab.redis_url, 100)
    assert lab.proxypool is not None and lab.accountpool is not None
    log = lab.tmp / "revoked.log"  # the worker's log (Lab.start_worker)
    backoffs = log.read_text().count("account pool (")
    lab.proxypool.stop()
    lab.accountpool.stop()
    lab.admin("/api/admin/revoke", {"all": True})
    wait_until(
        lambda: log.read_text().count("account pool (") > backoffs,
        "the worker to back off while the account pool is down",
        timeout=60,
    )
    lab.proxypool.start()
    lab.accountpool.start()
    stats = wait_workers([worker])[0]
    assert_every_book_once(lab)
    assert number(stats, "auth/rejected") >= 2
    assert number(stats, "auth/report/rejected") >= 2
    assert number(stats, "auth/pool/fetched") >= 3
    assert number(stats, "auth/pool/error") >= 1
    assert number(stats, "auth/backoff/count") >= 1
    # Whether the proxy middleware asked its pool during the outage depends on timing (requests
    # may all be waiting for a token meanwhile); test_book_middlewares_pools covers that wait.
    assert number(stats, "proxy/failed") >= 1
    assert number(stats, "proxy/report/failed") >= 1
    assert "httperror/response_ignored_count" not in stats  # no 401 reached the spider
