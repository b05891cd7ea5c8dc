"""Sentinel failover under a crawl: the primary is killed with SIGKILL at 30 % and the crawl ends
with every page, twice at most for what was in flight; the clients (and the workers' liveness
subscriptions) follow the new primary."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx
import redis
from support.backends import assert_redis_drained
from support.crawl import Site, assert_crawl_survived, frontier_settings
from support.net import free_port
from support.sentinel import SentinelGroup
from support.services import start_process, stop_process, wait_healthy
from support.waiting import wait_until

from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.keys import SpiderKeys

CONCURRENT, PREFETCH = 2, 2
API_KEY = "sentinel-pool-test-key-0123"
KEYS = SpiderKeys("site")


def test_primary_sigkill_at_30_percent_loses_no_page(
    site: Site, start_worker, sentinel_group: SentinelGroup
) -> None:
    # The chain (one link per page, 0.3 s each) is still being discovered after the failover,
    # so a new fingerprint there is the first enqueue on the new primary. Without it every /p
    # page may be known before the kill and nothing new is ever enqueued.
    site.pages, site.delay, site.chain = 90, 0.05, 40
    url = sentinel_group.url()
    settings = frontier_settings(
        url, CONCURRENT_REQUESTS=CONCURRENT, SCHEDULER_PREFETCH=PREFETCH
    )  # SCHEDULER_WAIT_REPLICAS defaults to 1 through Sentinel
    workers = [start_worker(site.url, settings, name) for name in ("a", "b")]
    wait_until(lambda: len(site.crawled()) >= 0.3 * site.pages, "30 % of the pages", 60)
    killed = time.monotonic()
    old = sentinel_group.kill_primary()
    new = sentinel_group.wait_failover(old)
    promoted = time.monotonic() - killed
    primary = sentinel_group.node_client(new)
    before = int(primary.scard("site:dupefilter"))
    wait_until(
        lambda: int(primary.scard("site:dupefilter")) > before,
        "the first enqueue on the new primary",
        30,
        0.01,
    )
    first_enqueue = time.monotonic() - killed

    # the liveness subscriptions follow the primary: each worker's next heartbeat there finds
    # its channel empty and it subscribes again, through the Sentinels, on the new primary
    # (a worker whose deadline passed during the failover was reaped by the other one on the new
    # primary, under load: it registers again at its next heartbeat)
    def registered() -> list[str]:
        return [m.decode() for m in primary.zrange(KEYS.workers, 0, -1)]

    wait_until(lambda: len(registered()) == 2, "both workers on the new primary", 30)
    ids = registered()
    wait_until(
        lambda: all(primary.pubsub_numsub(KEYS.alive(w))[0][1] == 1 for w in ids),
        "the liveness subscriptions on the new primary",
        30,
    )
    # beyond what was in flight: each worker's downloads plus its prefetched batch
    twice = assert_crawl_survived(site, workers, 2 * (CONCURRENT + PREFETCH), 120)
    assert_redis_drained(primary)
    print(
        f"failover: promoted after {promoted:.2f} s, first enqueue {first_enqueue:.2f} s after "
        f"the kill, {twice} page(s) crawled twice"
    )


def test_client_follows_failover_and_reloads_scripts(sentinel_group: SentinelGroup) -> None:
    url = sentinel_group.url(db=3)
    client = get_redis(url, socket_timeout=2, socket_connect_timeout=2)
    check_connection(client, url)
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    assert script(keys=["counter"]) == 1
    assert client.wait(1, 1000) >= 1
    old = sentinel_group.kill_primary()
    sentinel_group.wait_failover(old)

    def incremented() -> bool:
        try:
            return bool(script(keys=["counter"]) == 2)  # the new primary never saw the script
        except redis.ConnectionError:
            return False

    wait_until(incremented, "the script to run on the new primary", 30, 0.02)
    assert (
        redis.Redis(port=sentinel_group.primary_port(), password=sentinel_group.password, db=3).get(
            "counter"
        )
        == b"2"
    )


def test_proxy_pool_answers_through_a_failover(
    sentinel_group: SentinelGroup, tmp_path: Path
) -> None:
    url = sentinel_group.url()
    primary = sentinel_group.node_client(sentinel_group.primary_port())
    primary.zadd("proxypool:proxies", {"10.0.0.1:8080": 100, "10.0.0.2:8080": 100})
    assert primary.wait(2, 2000) == 2
    port = free_port()
    log = tmp_path / "proxypool.log"
    argv = [str(Path(sys.executable).parent / "crawlfleet"), "proxypool", "serve"]
    argv += ["--port", str(port), "--redis-url", url, "--no-fetch", "--no-test"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXYPOOL_")}
    env["PROXYPOOL_API_KEY"] = API_KEY
    pool = start_process(argv, log, env=env)
    try:
        wait_healthy(pool, f"http://127.0.0.1:{port}/health", log, timeout=20)
        headers = {"X-API-Key": API_KEY}
        seen: list[int] = []

        def random_proxy() -> int:
            response = httpx.get(
                f"http://127.0.0.1:{port}/random", headers=headers, timeout=5, trust_env=False
            )
            if response.status_code == 200:
                assert response.text.strip() in ("10.0.0.1:8080", "10.0.0.2:8080")
            seen.append(response.status_code)
            return response.status_code

        assert random_proxy() == 200
        old = sentinel_group.kill_primary()
        killed = time.monotonic()

        def promoted() -> bool:
            random_proxy()  # asked all through the switch
            ports = sentinel_group.named_primaries()
            return len(ports) == 1 and not ports & {old, None}

        wait_until(promoted, "a replica promoted while the pool answers", 30, 0.01)
        wait_until(lambda: random_proxy() == 200, "200 through the new primary", 30, 0.02)
        assert set(seen) <= {200, 503}, seen  # 503 during the switch at most, then 200
        assert random_proxy() == 200
        print(
            f"proxy pool: {seen.count(503)} answer(s) 503, 200 again "
            f"{time.monotonic() - killed:.2f} s after the kill"
        )
    finally:
        stop_process(pool)


def test_a_lease_the_worker_does_not_know_is_returned(
    site: Site, redis_url: str, start_worker
) -> None:
    """As after a failover that lost a pop's reply or an ack: the crawl still ends."""
    site.pages = 10
    client = redis.Redis.from_url(redis_url)
    orphan = json.dumps({"url": f"{site.url}/p/9", "dont_filter": True})
    client.hset("site:leases:w-orphan", "999999", orphan)  # an id no pop gives
    settings = frontier_settings(
        redis_url,
        SCHEDULER_WORKER_ID="w-orphan",
        SCHEDULER_QUEUE_CLASS="crawlfleet.frontier.queues.FifoQueue",
    )
    worker = start_worker(site.url, settings)
    assert worker.wait() == 0
    assert site.crawled() == site.expected()
    assert site.hits["/p/9"] == 2  # once from the crawl, once as the returned lease
    assert "does not know" in worker.log.read_text()
    assert_redis_drained(client)


def test_two_workers_each_holding_an_unknown_lease_both_finish(
    site: Site, redis_url: str, start_worker
) -> None:
    """A failover can cost both workers an ack or a pop's reply: each then holds a lease it does
    not know, and each sees the other's as work still leased elsewhere. Each gives its own back
    (it would otherwise wait for the other forever: CI saw this hang)."""
    site.pages = 10
    client = redis.Redis.from_url(redis_url)
    seconds, micros = client.time()
    later = seconds * 1000 + micros // 1000 + 60_000  # registered as if still alive
    # the crawl is under way (nobody seeds): w-a's unknown lease is the start page, w-b's /p/9
    for worker, page in (("w-a", 0), ("w-b", 9)):
        orphan = json.dumps({"url": f"{site.url}/p/{page}", "dont_filter": True})
        client.hset(KEYS.leases(worker), f"99999{page}", orphan)  # ids no pop gives
        client.zadd(KEYS.workers, {worker: later})
    workers = [
        start_worker(
            site.url,
            frontier_settings(
                redis_url,
                SCHEDULER_WORKER_ID=worker,
                SCHEDULER_QUEUE_CLASS="crawlfleet.frontier.queues.FifoQueue",
            ),
            worker,
        )
        for worker in ("w-a", "w-b")
    ]
    for worker in workers:
        assert worker.wait() == 0
    assert site.crawled() == site.expected()
    assert site.hits["/p/0"] == 1 and site.hits["/p/9"] == 2  # from the tree, and as a lease
    for worker in workers:
        assert "does not know" in worker.log.read_text()
    assert_redis_drained(client)
