"""Which limit binds a crawl, shown by `crawlfleet status`, the dashboard's page (headless
Chromium) and /metrics, while the real Budget paces keys on Redis's own clock in real time.

A registered worker with requests in the queue comes from the real scheduler; a thread takes
every slot of two proxied keys (the site binds), one more key is banned (its proxy cools down);
when the thread stops, the keys fall below their budget while requests still wait: the workers
bind.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from ops_helpers import cli
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler
from support.dashboard import KEY, browser, snapshot, start_dashboard
from support.waiting import wait_until

from crawlfleet.dashboard.metrics import METRIC_KEYS
from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.politeness.budget import Budget, Outcome
from crawlfleet.politeness.config import Limits, PolitenessConfig

__all__ = ["start_dashboard"]  # the fixture, shared with the dashboard's own tests

SPIDER = "site"
FULL = ("books.test@127.0.0.2:3128", "books.test@127.0.0.3:3128")
BANNED = "books.test@127.0.0.4:3128"


class SiteSpider(Spider):
    name = SPIDER


class Driver:
    """Takes every slot of the FULL keys (a clean response each) until stopped."""

    def __init__(self, client: redis.Redis) -> None:
        # no probing up (max = rate): a loaded machine's thread must keep its keys full
        config = PolitenessConfig(limits=Limits(10.0, 1.0, 10.0, 1), namespace=SPIDER)
        self.budget = Budget(client, config)  # Redis's clock, as in a crawl
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            waits = []
            for key in FULL:
                wait = self.budget.acquire(key)
                if wait == 0:
                    self.budget.record(key, Outcome(ban=False))
                waits.append(wait)
            self.stop.wait(min(waits))


@pytest.fixture
def crawl(redis_url: str) -> Iterator[Driver]:
    """A registered worker with 30 queued requests, and the driver running."""
    crawler = get_crawler(
        SiteSpider,
        {"REDIS_URL": redis_url, "SCHEDULER_HEARTBEAT_INTERVAL": 10, "POLITENESS_ENABLED": False},
    )
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    for i in range(30):
        scheduler.enqueue_request(Request(f"http://books.test/p/{i}"))
    driver = Driver(redis.Redis.from_url(redis_url))
    driver.budget.record(BANNED, Outcome(ban=True))
    driver.thread.start()
    yield driver
    driver.stop.set()
    driver.thread.join(10)
    for loop in scheduler._loops:
        if loop.running:
            loop.stop()


def status(redis_url: str, *extra: str) -> tuple[int, str, str]:
    result = cli("status", SPIDER, "--redis-url", redis_url, *extra)
    return result.code, result.out, result.err


def politeness(redis_url: str) -> dict:
    code, out, err = status(redis_url, "--json")
    assert code == 0, err
    view = json.loads(out)
    assert view["hub"]["rtt_ms"] > 0
    return view["spiders"][0]["politeness"]


def test_status_names_the_site_then_the_workers(redis_url: str, crawl: Driver) -> None:
    def site_binds() -> bool:
        section = politeness(redis_url)
        states = {k["key"]: k["state"] for k in section["keys"]}
        return section["bound"] == "site" and states == {
            FULL[0]: "full",
            FULL[1]: "full",
            BANNED: "cooling",
        }

    wait_until(site_binds, timeout=20, what="two full keys and one cooling down")
    section = politeness(redis_url)
    rows = {k["key"]: k for k in section["keys"]}
    assert rows[BANNED]["budget"] == 5.0 and 15 < rows[BANNED]["cooldown"] <= 20
    assert rows[BANNED]["bans_recent"] == 1 and section["bans_recent"] == 1
    assert section["reason"] == "3 of 3 active keys held (2 full, 1 cooling): add proxies"
    code, out, _ = status(redis_url)
    assert code == 0
    for needle in ("limit", "site — 3 of 3 active keys held", "127.0.0.4:3128", "cooling"):
        assert needle in out, needle
    assert "hub: PING" in out

    # a state hash with garbage fields costs one warning line, never the command
    keys = SpiderKeys(SPIDER)
    client = redis.Redis.from_url(redis_url)
    client.hset(keys.politeness("junk.test"), mapping={"rate": "fast", "tat": "x"})
    client.zadd(keys.politeness_index, {keys.politeness("junk.test"): time.time() * 1000})
    code, out, err = status(redis_url)
    assert code == 0, err
    (line,) = [w for w in out.splitlines() if w.startswith("warning:")]
    assert "'junk.test'" in line and "skipped" in line
    assert "junk.test" in politeness(redis_url)["warnings"][0]

    crawl.stop.set()  # no one takes the slots any more, and 30 requests wait
    wait_until(
        lambda: politeness(redis_url)["bound"] == "workers",
        timeout=30,
        what="the keys to fall below their budget",
    )
    section = politeness(redis_url)
    assert {k["key"]: k["state"] for k in section["keys"]}[FULL[0]] == "slack"
    assert section["reason"].endswith("add hosts")


def test_dashboard_page_and_metrics_show_the_bound(
    redis_url: str, crawl: Driver, start_dashboard, tmp_path: Path
) -> None:
    dash = start_dashboard(redis_url)
    headers = {"X-API-Key": KEY}

    def api_site() -> bool:
        pol = dash.get("/api/status", headers=headers).json()["spiders"][0]["politeness"]
        return pol["bound"] == "site"

    wait_until(api_site, timeout=20, what="/api/status to name the site")
    driver = browser(tmp_path)
    try:
        driver.get(f"http://ops:{KEY}@127.0.0.1:{dash.port}/")
        section = f'section[data-spider="{SPIDER}"]'
        wait_until(
            lambda: bool(snapshot(driver, f'{section} .limit[data-bound="site"]')),
            timeout=20,
            what="the page to name the site",
        )
        limit = snapshot(driver, f"{section} .limit")
        assert "add proxies" in str(limit[0]["text"]), limit
        cooling = snapshot(driver, f'{section} tr.key-row[data-state="cooling"]', "data-key")
        assert [r["data-key"] for r in cooling] == [BANNED]
        assert "PING" in str(snapshot(driver, "#redis")[0]["text"])
        problems = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert not problems, problems
    finally:
        driver.quit()

    seen: dict[str, Any] = {}

    def metrics_site() -> bool:
        # one read that holds the whole picture: the verdict and the three keys held
        seen["families"] = metric_families(dash.get("/metrics", headers=headers).text)
        found = seen["families"]["crawlfleet_politeness_bound"]
        bound = {s.labels["bound"]: s.value for s in found}
        held = {s.labels["proxy"]: s.value for s in seen["families"]["crawlfleet_politeness_held"]}
        return bound == {"none": 0.0, "workers": 0.0, "site": 1.0, "hub": 0.0} and all(
            held.get(p) == 1.0 for p in ("127.0.0.2:3128", "127.0.0.3:3128", "127.0.0.4:3128")
        )

    wait_until(metrics_site, timeout=20, what="/metrics to name the site")
    families = seen["families"]
    cool = {s.labels["proxy"]: s.value for s in families["crawlfleet_politeness_cooldown_seconds"]}
    assert cool["127.0.0.4:3128"] > 0 and cool["127.0.0.2:3128"] == 0
    held = {s.labels["proxy"]: s.value for s in families["crawlfleet_politeness_held"]}
    assert held == dict.fromkeys(("127.0.0.2:3128", "127.0.0.3:3128", "127.0.0.4:3128"), 1.0)
    assert families["crawlfleet_hub_rtt_seconds"][0].value > 0

    for i in range(METRIC_KEYS + 5):  # more keys than /metrics gives labels to
        crawl.budget.lease(f"other{i}.test", 1)
    families = metric_families(dash.get("/metrics", headers=headers).text)
    assert families["crawlfleet_politeness_keys"][0].value == METRIC_KEYS + 5 + 3
    # bounded: the most recently used keys only
    assert len(families["crawlfleet_politeness_budget"]) == METRIC_KEYS
    assert len(families["crawlfleet_politeness_held"]) == METRIC_KEYS


def metric_families(body: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(body)}


def test_status_finds_the_keys_of_a_crawl_with_its_own_politeness_namespace(
    redis_url: str,
) -> None:
    """POLITENESS_NAMESPACE=shared: the worker records it in <spider>:frontier, status reads it."""
    settings = {
        "REDIS_URL": redis_url,
        "SCHEDULER_HEARTBEAT_INTERVAL": 10,
        "DOWNLOADER_MIDDLEWARES": {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750},
        "POLITENESS_NAMESPACE": "shared",
    }
    crawler = get_crawler(SiteSpider, settings)
    crawler.spider = crawler._create_spider()
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    try:
        scheduler.enqueue_request(Request("http://books.test/p/1"))
        assert scheduler.next_request() is not None  # it holds a slot of books.test now
    finally:
        scheduler._stop_loops()
    client = redis.Redis.from_url(redis_url)
    assert client.hget(SpiderKeys(SPIDER).frontier, "politeness_namespace") == b"shared"
    assert client.exists(SpiderKeys(SPIDER).politeness_index) == 0
    section = politeness(redis_url)
    assert section["namespace"] == "shared"
    assert [k["key"] for k in section["keys"]] == ["books.test"]
