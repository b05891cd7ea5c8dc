"""One crawl split into three shards (SCHEDULER_SHARDS=3) on a real six-node Redis Cluster: the
shards live on the three primaries, every key of a site in its shard's one slot; two workers crawl
eight sites (eight loopback addresses, so eight politeness keys) and one is SIGKILLed mid-crawl:
no page is lost and none is crawled twice beyond what the victim held; ``crawlfleet status``
sums the shards and ``purge`` leaves nothing."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from redis.crc import key_slot
from scrapy import Request
from scrapy.utils.request import fingerprint
from support.crawl import Site, frontier_settings
from support.rediscluster import RedisClusterGroup
from support.sites import QuietHandler, serve_http, url_of
from support.waiting import wait_until

from crawlfleet import cli
from crawlfleet.frontier.shards import shard_of
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.views.crawl import spider_snapshot

HOSTS = [f"127.0.0.{i}" for i in range(2, 10)]  # eight hosts on Linux's loopback
SHARDS = SpiderKeys("site", tagged=True).of_shards(3)
POLITE = {
    "DOWNLOADER_MIDDLEWARES": {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750},
    "POLITENESS_RATE": 100,
    "POLITENESS_MAX_RATE": 100,
}


@pytest.fixture
def sites() -> Iterator[tuple[Site, list[str]]]:
    """The test site's link graph spread over eight hosts: page i lives on host i % 8, and every
    link names its page's host (hits counted per path, whatever host served it)."""
    state = Site(pages=160, delay=0.1)
    bases: list[str] = []

    def absolute(match: re.Match[bytes]) -> bytes:
        i = int(match[1])
        return b'href="' + f"{bases[i % len(bases)]}/p/{i}".encode() + b'"'

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            status, body, delay = state.body(self.path)
            with state.lock:
                state.hits[self.path] += 1
            if delay:
                time.sleep(delay)
            self.reply(status, re.sub(rb'href="/p/(\d+)"', absolute, body))

    with ExitStack() as stack:
        for host in HOSTS:
            bases.append(url_of(stack.enter_context(serve_http(Handler, host=host))))
        state.url = bases[0]
        yield state, bases


def site_queues_in_their_slots(cluster: RedisClusterGroup) -> bool:
    """Mid-crawl: every site's queue is in its shard, on that shard's primary."""
    found = {
        key: port
        for port, keys in cluster.keys_by_node().items()
        for key in keys
        if ":requests:site:" in key
    }
    if len(found) < 3:
        return False
    for key, port in found.items():
        host = key.rsplit(":", 1)[1]
        shard = SHARDS[shard_of(host, 3)]
        assert key.startswith(shard.prefix + ":requests:site:"), key
        assert key_slot(key.encode()) == key_slot(shard.prefix.encode())
        assert port == cluster.slot_owner(shard.prefix)
    return len({key.split(":")[0] for key in found}) == 3


def test_two_workers_crawl_three_shards_and_one_is_killed(
    sites: tuple[Site, list[str]], start_worker, cluster: RedisClusterGroup
) -> None:
    site, bases = sites
    owners = {cluster.slot_owner(k.prefix) for k in SHARDS}
    assert len(owners) == 3 and owners == set(cluster.primaries())  # a shard per primary
    assert {shard_of(h, 3) for h in HOSTS} == {0, 1, 2}
    settings = frontier_settings(cluster.url(), SCHEDULER_SHARDS=3, CONCURRENT_REQUESTS=4, **POLITE)
    victim = start_worker(site.url, settings, "victim")
    survivor = start_worker(site.url, settings, "survivor")
    wait_until(
        lambda: len(victim.parsed()) >= 5 and len(survivor.parsed()) >= 5,
        what="both workers to crawl",
    )
    wait_until(lambda: site_queues_in_their_slots(cluster), what="site queues in all 3 shards")
    client = cluster.client()
    try:
        per_shard = [int(client.hget(k.stats, "scheduler/dequeued") or 0) for k in SHARDS]
        view = spider_snapshot(client, "site")
        assert view["workers_alive"] == 2
        assert view["counters"]["scheduler/dequeued"] >= sum(per_shard) > 0
    finally:
        client.close()
    victim.proc.send_signal(signal.SIGKILL)
    victim.wait()
    assert survivor.wait(180) == 0, survivor.log.read_text()[-3000:]
    assert survivor.summary()["reason"] == "finished"
    assert site.crawled() == site.expected()
    twice = {p: n for p, n in site.hits.items() if p in site.expected() and n > 1}
    # beyond what the victim held (CONCURRENT_REQUESTS in flight, its prefetched requests, and
    # the finished ones not yet acknowledged), every page once
    assert sum(n - 1 for n in twice.values()) <= 12, twice
    parsed = Counter(p for w in (victim, survivor) for p in w.parsed())
    assert set(parsed) == site.expected()

    client = cluster.client()
    try:
        assert client.get("{site}:shards") == b"3"
        # the victim's leases went back to the queue, in some shard
        assert sum(int(client.hget(k.stats, "scheduler/requeued") or 0) for k in SHARDS) > 0
        # every fingerprint in the shard of its site's queue
        for i in range(1, site.pages):
            url = f"{bases[i % len(bases)]}/p/{i}"
            fp = fingerprint(Request(url)).hex()
            holder = SHARDS[shard_of(HOSTS[i % len(HOSTS)], 3)]
            assert client.sismember(holder.dupefilter, fp), url
        sizes = [int(client.scard(k.dupefilter)) for k in SHARDS]
        assert sum(sizes) == site.pages - 1 and all(sizes)  # the start page: dont_filter
        view = spider_snapshot(client, "site")
        assert view["queued"] == 0 and view["leased"] == 0
        assert view["dupefilter"]["fingerprints"] == site.pages - 1
        assert view["counters"]["scheduler/acked"] >= site.pages
        # (the victim's last counts died with it: they go with a worker's next round trip)
        assert 0 < view["counters"]["scheduler/enqueued"] <= site.pages
        for k in SHARDS:
            assert client.zcard(k.workers) <= 1  # the victim's registration was reaped or is
            assert not client.hlen(k.leases(survivor_id(client, k)))
    finally:
        client.close()
    by_node = cluster.keys_by_node()
    for port, keys in by_node.items():  # each node holds one shard's slot, nothing else
        assert {key_slot(k.encode()) for k in keys} <= {key_slot(s.prefix.encode()) for s in SHARDS}
        assert len({k.split(":")[0] for k in keys}) <= 1, keys
    assert cli.main(["purge", "site", "-y", "--redis-url", cluster.url()]) == 0
    # every shard's keys are gone; what the politeness keys learned stays, in the home slot
    left = [k for keys in cluster.keys_by_node().values() for k in keys]
    assert left and all(k.startswith("{site}:politeness:") for k in left), left
    assert cli.main(["politeness", "site", "--reset", "-y", "--redis-url", cluster.url()]) == 0
    assert not any(cluster.keys_by_node().values())


def survivor_id(client, keys: SpiderKeys) -> str:
    """The worker id still registered in a shard ('' when none is)."""
    members = client.zrange(keys.workers, 0, -1)
    return members[0].decode() if members else ""
