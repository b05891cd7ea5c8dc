"""One crawl split into three shards (SCHEDULER_SHARDS=3) on a real redis-server, schedulers
driven directly: a request's queue entry and fingerprint go to its site's shard, pops take the
shards in turn and acknowledgements go back where the lease came from, another worker and the
operator tools (status, pause, requeue-failed, purge) see the crawl whole, and a crawl is never
restarted with another shard count."""

from __future__ import annotations

from collections import Counter

import pytest
import redis
from scrapy import Request
from scrapy.utils.request import fingerprint
from support.schedulers import MakeScheduler
from twisted.python.failure import Failure

from crawlfleet import cli
from crawlfleet.frontier.config import FrontierConfigError
from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.frontier.shards import shard_of
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.views.crawl import spider_snapshot

# a queue per site, as with politeness on, without its pacing (pops here are not paced)
KEYED = "crawlfleet.frontier.queues.KeyedPriorityQueue"
SHARDS = SpiderKeys("site").of_shards(3)  # prefixes site, site~2, site~1
HOSTS = [f"h{i}.example" for i in range(12)]


@pytest.fixture
def scheduler_defaults() -> dict[str, object]:
    return {"SCHEDULER_QUEUE_CLASS": KEYED, "SCHEDULER_SHARDS": 3}


def fill(s: Scheduler, per_host: int = 2) -> list[str]:
    urls = [f"https://{h}/{i}" for h in HOSTS for i in range(per_host)]
    for url in urls:
        s.enqueue_request(Request(url))
    return urls


def drain(s: Scheduler) -> list[Request]:
    out = []
    while (request := s.next_request()) is not None:
        out.append(request)
    return out


def test_requests_live_in_their_sites_shard_and_pops_take_turns(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=2)
    assert redis_client.get("site:shards") == b"3"
    urls = fill(s)
    assert {shard_of(h, 3) for h in HOSTS} == {0, 1, 2}
    for host in HOSTS:
        keys = SHARDS[shard_of(host, 3)]
        assert redis_client.zcard(f"{keys.prefix}:requests:site:{host}") == 2
        for other in SHARDS:
            if other is not keys:
                assert not redis_client.exists(f"{other.prefix}:requests:site:{host}")
    for url in urls:  # the fingerprint in the same shard as the queue entry
        fp = fingerprint(Request(url)).hex()
        holders = [k for k in SHARDS if redis_client.sismember(k.dupefilter, fp)]
        assert holders == [SHARDS[shard_of(url.split("/")[2], 3)]]
    assert s.enqueue_request(Request(urls[5])) is False  # a duplicate, filtered in its shard
    assert len(s) == len(urls)

    got = drain(s)
    assert sorted(r.url for r in got) == sorted(urls)
    order = [r.errback.lease.shard for r in got]  # the FailureTap holds the lease
    assert sorted(order[:6]) == [0, 0, 1, 1, 2, 2]  # three pops of two: one per shard
    assert Counter(order) == Counter(shard_of(u.split("/")[2], 3) for u in urls)
    # nothing is left to pop anywhere: the status says so, every worker key in every shard
    s._heartbeat()  # acknowledges every finished lease to the shard it came from
    for keys in SHARDS:
        assert redis_client.hlen(keys.leases(s.worker)) == 0
        assert redis_client.zscore(keys.workers, s.worker) is not None
    acked = [int(redis_client.hget(k.stats, "scheduler/acked") or 0) for k in SHARDS]
    assert sum(acked) == len(urls) and all(acked)
    view = spider_snapshot(redis_client, "site")
    assert (view["queued"], view["leased"], view["acked"]) == (0, 0, len(urls))
    assert view["counters"]["scheduler/dequeued"] == len(urls)
    assert view["dupefilter"]["fingerprints"] == len(urls)
    s.close("finished")
    assert not any(redis_client.zcard(k.workers) for k in SHARDS)


def test_another_worker_and_the_operator_tools_see_every_shard(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, redis_url: str, capsys
) -> None:
    a = make_scheduler(SCHEDULER_PREFETCH=4)
    urls = fill(a)
    a._flush_pending()
    b = make_scheduler(SCHEDULER_PREFETCH=4)
    view = spider_snapshot(redis_client, "site")
    assert view["queued"] == len(urls) and view["workers_alive"] == 2
    assert view["shards"] == len(SHARDS) == 3
    first = b.next_request()
    assert first is not None
    view = spider_snapshot(redis_client, "site")
    held = {w["id"]: w["leased"] for w in view["workers"]}
    assert view["leased"] == held[b.worker] == 4 and view["queued"] == len(urls) - 4

    # pause stops every shard: the home shard's flag, seen by the next heartbeat
    assert cli.main(["pause", "site", "--redis-url", redis_url]) == 0
    for s in (a, b):
        s._heartbeat()
        assert s._status.paused and s.next_request() is None
    queued = spider_snapshot(redis_client, "site")["queued"]
    assert queued == len(urls) - 4
    assert cli.main(["resume", "site", "--redis-url", redis_url]) == 0
    b._heartbeat()
    failing = b.next_request()
    assert failing is not None
    # a final failure goes to its shard's failed list, and requeue-failed puts it back there
    failing.errback(Failure(ConnectionRefusedError("refused")))
    rest = [first, failing, *drain(b)]
    assert sorted(r.url for r in rest) == sorted(urls)
    b._heartbeat()
    home = shard_of(failing.url.split("/")[2], 3)
    assert [redis_client.llen(k.failed) for k in SHARDS].count(1) == 1
    assert redis_client.llen(SHARDS[home].failed) == 1
    assert view_of(redis_client)["failed"] == 1
    capsys.readouterr()
    assert cli.main(["requeue-failed", "site", "--redis-url", redis_url]) == 0
    assert "requeued 1 failed request(s)" in capsys.readouterr().out
    assert redis_client.zcard(f"{SHARDS[home].prefix}:requests:site:{failing.url.split('/')[2]}")
    b._heartbeat()  # b learns of it at its next round trip
    again = drain(b)
    assert [r.url for r in again] == [failing.url]
    for s in (a, b):
        s.close("finished")

    # purge removes every shard's keys and the shard record
    assert cli.main(["purge", "site", "-y", "--redis-url", redis_url]) == 0
    assert sorted(redis_client.scan_iter("site*")) == []


def view_of(client: redis.Redis) -> dict[str, object]:
    return spider_snapshot(client, "site")


def test_start_urls_are_fed_into_their_sites_shards(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(REDIS_START_URLS_BATCH_SIZE=50)
    urls = [f"https://{h}/start" for h in HOSTS]
    redis_client.rpush("site:start_urls", *urls, "not a url", urls[0])
    s._feed()
    assert redis_client.llen("site:start_urls") == 0
    for host in HOSTS:
        keys = SHARDS[shard_of(host, 3)]
        assert redis_client.zcard(f"{keys.prefix}:requests:site:{host}") == 1
    assert redis_client.llen("site:deadletter") == 1  # the bad entry, in the home shard
    assert len(s) == len(urls)
    assert sorted(r.url for r in drain(s)) == sorted(urls)  # the repeated one: filtered


def test_a_crawl_keeps_its_shard_count(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    make_scheduler().close("finished")
    with pytest.raises(FrontierConfigError) as info:
        make_scheduler(SCHEDULER_SHARDS=2)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("SCHEDULER_SHARDS is 2 but the crawl 'site' in Redis was split")
    assert "into 3 shard(s) (site:shards); purge it first (crawlfleet purge site)" in message
    redis_client.flushdb()
    unsharded = make_scheduler(SCHEDULER_SHARDS=1)  # today's names, no record written
    unsharded.enqueue_request(Request("https://h1.example/"))
    unsharded.close("finished")
    assert not redis_client.exists("site:shards")
    assert not [k for k in redis_client.scan_iter("site~*")]
    with pytest.raises(FrontierConfigError, match=r"SCHEDULER_SHARDS is 3 .* into 1 shard"):
        make_scheduler()
