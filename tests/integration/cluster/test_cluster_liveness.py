"""The liveness subscription on a real six-node Redis Cluster: each worker holds a sharded
subscription (``SSUBSCRIBE``) to ``{site}:alive:<worker>`` on the node serving the crawl's slot,
the frontier's scripts count it there (``PUBSUB SHARDNUMSUB``), and a SIGKILLed worker's leases
come back long before its lease deadline (30 s, heartbeat 1 s), on Redis server time."""

from __future__ import annotations

import signal

import redis
from support.crawl import Site, frontier_settings, start_two
from support.rediscluster import RedisClusterGroup
from support.waiting import wait_until

from crawlfleet.hub.keys import SpiderKeys

KEYS = SpiderKeys("site", tagged=True)
SHARDNUMSUB = "return redis.call('PUBSUB', 'SHARDNUMSUB', ARGV[1])[2]"


def test_a_sigkilled_worker_is_reaped_long_before_its_deadline(
    site: Site, start_worker, cluster: RedisClusterGroup
) -> None:
    site.pages, site.delay = 60, 0.3
    settings = frontier_settings(
        cluster.url(),
        SCHEDULER_LEASE_TIMEOUT=30,
        SCHEDULER_HEARTBEAT_INTERVAL=1,
        CONCURRENT_REQUESTS=2,
    )
    victim, survivor = start_two(start_worker, site, settings)
    client: redis.RedisCluster = cluster.client()
    try:
        ids = [m.decode() for m in client.zrange(KEYS.workers, 0, -1)]
        vid = next(w for w in ids if f":{victim.proc.pid}:" in w)
        # sharded subscriptions, counted by a script on the crawl's node
        for w in ids:
            assert client.eval(SHARDNUMSUB, 1, KEYS.workers, KEYS.alive(w)) == 1
            assert client.hget(KEYS.worker(w), "alive_sharded") == b"1"
        victim.proc.send_signal(signal.SIGKILL)
        victim.wait()
        deadline = client.zscore(KEYS.workers, vid)
        assert deadline is not None
        wait_until(
            lambda: client.zscore(KEYS.workers, vid) is None,
            what="the victim to be reaped",
            timeout=60,
        )
        seconds, micros = client.eval("return redis.call('TIME')", 1, KEYS.workers)
        assert int(seconds) * 1000 + int(micros) // 1000 < deadline - 15_000
        assert int(client.hget(KEYS.stats, "scheduler/requeued") or 0) > 0
    finally:
        client.close()
    assert survivor.wait(120) == 0, survivor.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
