"""Fixtures of the book tests (helpers live in book_lab.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from book_lab import Lab

from redis_server import RedisServer


@pytest.fixture
def lab(tmp_path: Path, redis_url: str) -> Iterator[Lab]:
    lab = Lab(tmp_path, redis_url)
    yield lab
    lab.close()


@pytest.fixture(scope="module")
def crawl_lab(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Lab]:
    """One 300-book site, three proxies and both pools, shared by a module's crawls
    (starting them takes longer than a crawl); see ``fresh_crawl``."""
    client = redis_server.client()
    client.flushall()
    client.close()
    lab = Lab(tmp_path_factory.mktemp("crawl-lab"), redis_server.url)
    try:
        lab.start_demosite(books=300)
        lab.start_proxies()
        # No account-pool tester: it checks tokens from 127.0.0.1, and the crawl tests assert
        # that every catalogue request the site sees came from a proxy.
        lab.crawl_env(lab.start_proxypool(), lab.start_accountpool("--no-tester"))
        yield lab
    finally:
        lab.close()


@pytest.fixture
def fresh_crawl(crawl_lab: Lab) -> Lab:
    """The shared lab with no crawl state: no ``book:*`` keys, default site limits, counters
    and bans cleared, every proxy and both pools running."""
    client = redis.Redis.from_url(crawl_lab.redis_url)
    keys = list(client.scan_iter("book:*"))
    if keys:
        client.delete(*keys)
    client.close()
    crawl_lab.admin("/api/admin/config", {"rate_limit": 0, "latency_ms": 0})
    crawl_lab.admin_delete("/api/admin/stats")
    for service in (*crawl_lab.proxy_services, crawl_lab.proxypool, crawl_lab.accountpool):
        if service is not None and (service.proc is None or service.proc.poll() is not None):
            service.start()
    return crawl_lab
