"""The liveness subscription (``SCHEDULER_LIVENESS``, crawlfleet.frontier.liveness) on a real
redis-server. The reaper's rules, with schedulers driven directly (time passes by moving a
worker's recorded times back): a worker with no subscriber and an old heartbeat is reaped, one
that holds its subscription is not, and a reaper whose own subscription is new or gone (a
restart, failover or CLIENT KILL dropped them all) reaps nobody that way. With worker
subprocesses: a SIGKILLed worker's leases come back long before its lease
deadline; a frozen (SIGSTOPped) worker keeps them; dropped subscriptions (``CLIENT KILL TYPE
pubsub``, a Redis restart) reap nobody and nothing is crawled twice.

Leases last 30 s (10 s for the dropped subscriptions; heartbeat 1 s), so the liveness bound (1.5 s
after the last heartbeat) and the deadline are far apart; times are Redis server times, compared
with the deadline Redis holds.
"""

from __future__ import annotations

import signal
import time

import pytest
import redis
from scrapy import Request
from support.crawl import Site, Worker, frontier_settings, start_two
from support.schedulers import MakeScheduler
from support.waiting import wait_until

from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.hub.keys import SpiderKeys

LIVE: dict[str, object] = {
    "SCHEDULER_LEASE_TIMEOUT": 30,
    "SCHEDULER_HEARTBEAT_INTERVAL": 1,
    "CONCURRENT_REQUESTS": 2,
}
KEYS = SpiderKeys("site")
KEYED = "crawlfleet.frontier.queues.KeyedPriorityQueue"


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def worker_id(client: redis.Redis, worker: Worker) -> str:
    """The frontier's id of a worker subprocess (``host:pid:random``)."""
    found: list[str] = []

    def registered() -> bool:
        found[:] = [
            m.decode()
            for m in client.zrange(KEYS.workers, 0, -1)
            if f":{worker.proc.pid}:" in m.decode()
        ]
        return bool(found)

    wait_until(registered, what=f"worker {worker.proc.pid} to register")
    return found[0]


def subscribers(client: redis.Redis, worker: str) -> int:
    return int(client.pubsub_numsub(KEYS.alive(worker))[0][1])


def requeued(client: redis.Redis) -> int:
    return int(client.hget(KEYS.stats, "scheduler/requeued") or 0)


def two_workers(site: Site, url: str, start_worker, **extra: object) -> tuple[Worker, Worker]:
    return start_two(start_worker, site, frontier_settings(url, **{**LIVE, **extra}))


def test_a_sigkilled_worker_is_reaped_long_before_its_deadline(
    site: Site, redis_url: str, start_worker
) -> None:
    site.pages, site.delay = 60, 0.3
    victim, survivor = two_workers(site, redis_url, start_worker)
    client = redis.Redis.from_url(redis_url)
    vid = worker_id(client, victim)
    assert subscribers(client, vid) == 1
    victim.proc.send_signal(signal.SIGKILL)
    victim.wait()
    deadline = client.zscore(KEYS.workers, vid)
    assert deadline is not None and client.hlen(KEYS.leases(vid)) > 0
    wait_until(
        lambda: client.zscore(KEYS.workers, vid) is None,
        what="the victim to be reaped",
        timeout=60,
    )
    # back well before the deadline (29 s after the last round trip): about 6 s after it here
    assert server_ms(client) < deadline - 15_000
    assert client.hlen(KEYS.leases(vid)) == 0 and requeued(client) > 0
    assert survivor.wait() == 0, survivor.log.read_text()[-3000:]
    assert site.crawled() == site.expected()


def test_a_frozen_worker_keeps_its_leases(site: Site, redis_url: str, start_worker) -> None:
    site.pages, site.delay = 40, 0.3
    frozen, other = two_workers(site, redis_url, start_worker)
    client = redis.Redis.from_url(redis_url)
    fid, oid = worker_id(client, frozen), worker_id(client, other)
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        held = client.hgetall(KEYS.leases(fid))
        beat = int(client.hget(KEYS.worker(fid), "heartbeat") or 0)
        # the other worker reaps at each heartbeat: let it look for several seconds after the
        # frozen one would be reaped were it unsubscribed (silent 5.8 s, bound 1.5 s)
        wait_until(
            lambda: int(client.hget(KEYS.worker(oid), "heartbeat") or 0) > beat + 10_000,
            what="the other worker's heartbeats",
            timeout=30,
        )
        assert subscribers(client, fid) == 1  # a stopped process keeps its socket
        assert client.zscore(KEYS.workers, fid) is not None
        assert client.hgetall(KEYS.leases(fid)) == held and requeued(client) == 0
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    assert frozen.wait() == 0 and other.wait() == 0
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1


@pytest.mark.parametrize("how", ["client-kill", "restart"])
def test_dropped_subscriptions_reap_nobody(site: Site, own_redis, start_worker, how: str) -> None:
    site.pages, site.delay = 80, 0.2
    # a deadline 9 s after the last round trip: silent for 1.8 s makes a worker a candidate
    workers = two_workers(site, own_redis.url, start_worker, SCHEDULER_LEASE_TIMEOUT=10)
    client = own_redis.client()
    ids = [worker_id(client, w) for w in workers]
    if how == "client-kill":
        assert client.client_kill_filter(_type="pubsub") == 2
    else:
        own_redis.stop()  # AOF on: what was written survives
        wait_until(
            lambda: all("Frontier Redis" in w.log.read_text() for w in workers),
            what="both workers to notice",
        )
        # an outage longer than the candidates' silence (1.8 s) and the liveness bound (1.5 s):
        # every worker is silent, unsubscribed and past the bound when Redis is back
        time.sleep(3)
        own_redis.start()
        client = own_redis.client()
    # each worker's next heartbeat finds its channel empty and subscribes again
    wait_until(
        lambda: all(subscribers(client, w) == 1 for w in ids),
        what="both workers to subscribe again",
        timeout=30,
    )
    for worker in workers:
        assert worker.wait() == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert requeued(client) == 0  # nobody was reaped
    assert max(site.hits[p] for p in site.expected()) == 1


# -- the reaper's rules, schedulers driven directly ---------------------------------------------


def quiet_for(client: redis.Redis, scheduler: Scheduler, ms: int, keys: SpiderKeys = KEYS) -> None:
    """Make ``scheduler`` look silent for ``ms``: its last round trip and heartbeat moved back."""
    w = scheduler.worker
    client.zincrby(keys.workers, -ms, w)
    client.hincrby(keys.worker(w), "heartbeat", -ms)


def subscribed_since(
    client: redis.Redis, scheduler: Scheduler, ms: int, keys: SpiderKeys = KEYS
) -> None:
    """Move back the time since which ``scheduler``'s subscription stands."""
    client.hincrby(keys.worker(scheduler.worker), "alive_since", -ms)


@pytest.fixture
def victim(make_scheduler: MakeScheduler) -> Scheduler:
    """A worker holding one lease, its loops stopped (heartbeat 1 s, deadline 29 s)."""
    scheduler = make_scheduler(**LIVE)
    assert scheduler.enqueue_request(Request("https://e.test/held"))
    assert scheduler.next_request() is not None
    scheduler._stop_loops()
    return scheduler


def test_an_unsubscribed_silent_worker_is_reaped(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, victim: Scheduler
) -> None:
    reaper = make_scheduler(**LIVE)
    victim._liveness[0].close()  # what SIGKILL does to its socket
    assert subscribers(redis_client, victim.worker) == 0
    quiet_for(redis_client, victim, 1_000)  # heartbeat 1 s old: within the bound (1.5 s)
    subscribed_since(redis_client, reaper, 10_000)
    reaper._heartbeat()
    assert redis_client.zscore(KEYS.workers, victim.worker) is not None
    quiet_for(redis_client, victim, 9_000)  # silent 10 s, still 19 s before its deadline
    reaper._heartbeat()
    assert redis_client.zscore(KEYS.workers, victim.worker) is None
    assert requeued(redis_client) == 1
    request = reaper.next_request()
    assert request is not None and request.url == "https://e.test/held"


def test_a_subscribed_silent_worker_keeps_its_leases(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, victim: Scheduler
) -> None:
    reaper = make_scheduler(**LIVE)
    quiet_for(redis_client, victim, 10_000)  # frozen: silent, but its socket is open
    subscribed_since(redis_client, reaper, 10_000)
    reaper._heartbeat()
    assert redis_client.zscore(KEYS.workers, victim.worker) is not None
    assert redis_client.hlen(KEYS.leases(victim.worker)) == 1 and requeued(redis_client) == 0


def test_a_reaper_with_a_new_or_lost_subscription_reaps_nobody(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, victim: Scheduler
) -> None:
    reaper = make_scheduler(**LIVE)
    victim._liveness[0].close()
    quiet_for(redis_client, victim, 10_000)
    reaper._heartbeat()  # subscribed at its start, not 1.5 s ago
    assert redis_client.zscore(KEYS.workers, victim.worker) is not None
    # CLIENT KILL (or a restart) drops the reaper's subscription too: its heartbeat finds none,
    # reaps nobody, and it subscribes again
    subscribed_since(redis_client, reaper, 10_000)
    assert redis_client.client_kill_filter(_type="pubsub") >= 1
    wait_until(lambda: subscribers(redis_client, reaper.worker) == 0, what="the kill")
    reaper._heartbeat()
    assert redis_client.zscore(KEYS.workers, victim.worker) is not None
    assert subscribers(redis_client, reaper.worker) == 1
    assert int(redis_client.hget(KEYS.worker(reaper.worker), "alive_since") or 0) == 0
    reaper._heartbeat()  # its subscription stands from now on
    assert redis_client.zscore(KEYS.workers, victim.worker) is not None
    subscribed_since(redis_client, reaper, 10_000)
    reaper._heartbeat()
    assert redis_client.zscore(KEYS.workers, victim.worker) is None


def test_liveness_off_declares_nothing(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    off = make_scheduler(**LIVE, SCHEDULER_LIVENESS=False)
    assert subscribers(redis_client, off.worker) == 0
    assert redis_client.hget(KEYS.worker(off.worker), "alive_ms") == b"0"
    quiet_for(redis_client, off, 10_000)  # silent and unsubscribed, but it never declared one
    reaper = make_scheduler(**LIVE)
    subscribed_since(redis_client, reaper, 10_000)
    reaper._heartbeat()
    assert redis_client.zscore(KEYS.workers, off.worker) is not None


def test_each_shard_reaps_a_worker_that_lost_its_subscriptions(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    settings = {**LIVE, "SCHEDULER_SHARDS": 3, "SCHEDULER_QUEUE_CLASS": KEYED}
    victim = make_scheduler(**settings)
    victim._stop_loops()
    reaper = make_scheduler(**settings)
    shards = KEYS.of_shards(3)
    for keys in shards:  # one subscription per shard, each to its shard's channel
        assert int(redis_client.pubsub_numsub(keys.alive(victim.worker))[0][1]) == 1
    for alive in victim._liveness:
        alive.close()
    for keys in shards:
        quiet_for(redis_client, victim, 10_000, keys)
        subscribed_since(redis_client, reaper, 10_000, keys)
    reaper._heartbeat()
    assert [redis_client.zscore(keys.workers, victim.worker) for keys in shards] == [None] * 3
    assert all(redis_client.zscore(keys.workers, reaper.worker) for keys in shards)
