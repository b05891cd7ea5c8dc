"""A Redis Cluster losing nodes under a crawl and under ``check_connection``: the primary of the
crawl's slot is SIGKILLed at 30 %, a replica takes over, and the crawl ends with every page (twice
at most for what was in flight); a cluster that cannot serve every slot, and one with no node
left, are one line each. Each test has a fresh cluster."""

from __future__ import annotations

import time

import pytest
import redis
from support.crawl import Site, assert_crawl_survived, frontier_settings
from support.rediscluster import RedisClusterGroup
from support.waiting import wait_until

from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.errors import RedisConfigError

CONCURRENT, PREFETCH = 2, 2


def test_primary_sigkill_at_30_percent_loses_no_page(
    site: Site, start_worker, redis_cluster: RedisClusterGroup
) -> None:
    # The chain (one link per page, 0.3 s each) is still being discovered after the failover,
    # so new fingerprints are enqueued on the new primary (as in the Sentinel failover test).
    site.pages, site.delay, site.chain = 90, 0.05, 40
    settings = frontier_settings(
        redis_cluster.url(), CONCURRENT_REQUESTS=CONCURRENT, SCHEDULER_PREFETCH=PREFETCH
    )  # SCHEDULER_WAIT_REPLICAS defaults to 1 on a cluster
    workers = [start_worker(site.url, settings, name) for name in ("a", "b")]
    wait_until(lambda: len(site.crawled()) >= 0.3 * site.pages, "30 % of the pages", 60)
    killed = time.monotonic()
    old = redis_cluster.kill_primary_of("{site}")
    new = redis_cluster.wait_failover("{site}", old)
    promoted = time.monotonic() - killed
    # The promoted replica has no replica of its own: enqueues wait (WAIT 1) until the killed
    # node is back, as systemd would restart it; it rejoins as the new primary's replica.
    redis_cluster.restart(old)
    redis_cluster.wait_ready()
    primary = redis_cluster.node_client(new)
    before = int(primary.scard("{site}:dupefilter"))
    wait_until(
        lambda: int(primary.scard("{site}:dupefilter")) > before,
        "the first enqueue on the new primary",
        60,
        0.01,
    )
    first_enqueue = time.monotonic() - killed
    # beyond what was in flight: each worker's downloads plus its prefetched batch
    twice = assert_crawl_survived(site, workers, 2 * (CONCURRENT + PREFETCH), 180)
    assert primary.zcard("{site}:workers") == 0
    assert not list(primary.scan_iter("{site}:leases:*"))
    assert primary.exists("{site}:requests") == 0
    print(
        f"cluster failover: promoted after {promoted:.2f} s, first enqueue {first_enqueue:.2f} s "
        f"after the kill, {twice} page(s) crawled twice"
    )


def test_a_cluster_down_and_one_without_nodes_are_one_line(
    redis_cluster: RedisClusterGroup,
) -> None:
    url = redis_cluster.url()
    client = get_redis(url, socket_timeout=2, socket_connect_timeout=2)
    check_connection(client, url)
    # a primary and its only replica gone: the cluster cannot serve every slot
    port = redis_cluster.slot_owner("{site}")
    replica = redis_cluster.node_client(port).info("replication")["slave0"]["port"]
    for node in redis_cluster.nodes:
        if node.port in (port, int(replica)):
            node.process.kill()
            node.process.wait(timeout=10)

    def down() -> bool:
        try:
            states = {redis_cluster.info(n.port).get("cluster_state") for n in redis_cluster.live()}
        except redis.RedisError:
            return False
        return states == {"fail"}

    wait_until(down, "every live node to say cluster_state:fail", 30)
    with pytest.raises(RedisConfigError) as info:
        check_connection(client, url)
    message = str(info.value)
    assert " is down (REDIS_URL): cluster_state is fail" in message and "\n" not in message
    assert redis_cluster.password not in message
    redis_cluster.stop()
    with pytest.raises(RedisConfigError) as info:
        check_connection(client, url)
    message = str(info.value)
    assert message.startswith("no node of the Redis Cluster at 127.0.0.1:") and "\n" not in message
    assert redis_cluster.password not in message
