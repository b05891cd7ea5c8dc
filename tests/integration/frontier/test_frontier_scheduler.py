"""The scheduler on a real redis-server, driven directly (no engine): queues, leases, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from scrapy import Request
from scrapy.utils.test import get_crawler
from support.schedulers import MakeScheduler, SiteSpider
from support.waiting import wait_until
from twisted.python.failure import Failure

from crawlfleet import cli
from crawlfleet.frontier.config import FrontierConfigError
from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.hub.errors import RedisConfigError

POP_SCRIPT = Path(__file__).with_name("frontier_pop.py")
ROOT = Path(__file__).resolve().parents[3]
QUEUE = "crawlfleet.frontier.queues.%s"


def redis_ms(client: redis.Redis) -> int:
    """The Redis server's clock in milliseconds (the one lease deadlines are written in)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def drain(scheduler: Scheduler) -> list[Request]:
    out = []
    while (request := scheduler.next_request()) is not None:
        out.append(request)
    return out


def test_fifo_order(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler(SCHEDULER_QUEUE_CLASS=QUEUE % "FifoQueue", SCHEDULER_PREFETCH=3)
    for i in range(7):
        assert s.enqueue_request(Request(f"https://e.test/{i}"))
    assert [r.url[-1] for r in drain(s)] == list("0123456")


def test_lifo_order(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler(SCHEDULER_QUEUE_CLASS=QUEUE % "LifoQueue")
    for i in range(5):
        s.enqueue_request(Request(f"https://e.test/{i}"))
    assert [r.url[-1] for r in drain(s)] == list("43210")


def test_priority_order_fifo_ties_and_duplicates_kept(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=4)
    for name, priority in [("a", 0), ("b", 5), ("c", 0), ("d", -3), ("e", 5), ("f", 0)]:
        s.enqueue_request(Request(f"https://e.test/{name}", priority=priority))
    for _ in range(2):  # identical dont_filter requests stay separate entries
        assert s.enqueue_request(Request("https://e.test/z", priority=-9, dont_filter=True))
    assert [r.url.rsplit("/", 1)[1] for r in drain(s)] == list("beacfdzz")


class CountingConnection(redis.Connection):
    """Counts round trips: one packed send per command or per pipeline batch."""

    sent = 0

    def send_packed_command(self, command: object, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


COUNTING = {"REDIS_PARAMS": {"connection_class": CountingConnection}}


def test_duplicates_are_filtered_in_the_same_round_trip(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s, other = make_scheduler(**COUNTING), make_scheduler(**COUNTING)
    assert s.enqueue_request(Request("https://e.test/x"))
    before = CountingConnection.sent
    assert not s.enqueue_request(Request("https://e.test/x"))
    assert CountingConnection.sent == before  # this worker saw Redis record it: no round trip
    assert not other.enqueue_request(Request("https://e.test/x"))
    assert other.enqueue_request(Request("https://e.test/y"))
    assert CountingConnection.sent - before == 2  # one round trip per enqueue, check included
    assert s.stats.get_value("dupefilter/filtered") == 1
    assert other.stats.get_value("dupefilter/filtered") == 1
    assert redis_client.scard("site:dupefilter") == 2
    # What Redis decided is counted by the script that decided it, in the same step (a SIGKILL
    # right after loses none of it): two enqueued, one filtered (other's), for each worker too.
    totals = redis_client.hgetall("site:stats")
    assert int(totals[b"scheduler/enqueued"]) == 2
    assert int(totals[b"dupefilter/filtered"]) == 1
    assert int(redis_client.hget(f"site:stats:{other.worker}", "scheduler/enqueued")) == 1
    assert int(redis_client.hget(f"site:stats:{other.worker}", "dupefilter/filtered")) == 1
    # The duplicate this worker filtered from its own cache travels with its next round trip
    # (a pop, a heartbeat or close): a SIGKILL loses at most those.
    s.close("finished")
    other.close("finished")
    assert int(redis_client.hget("site:stats", "dupefilter/filtered")) == 2
    assert int(redis_client.hget("site:stats", "scheduler/enqueued")) == 2


def test_seen_cache_is_bounded(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler(SCHEDULER_SEEN_CACHE=2, **COUNTING)
    for name in "abc":
        s.enqueue_request(Request(f"https://e.test/{name}"))
    before = CountingConnection.sent
    assert not s.enqueue_request(Request("https://e.test/c"))
    assert CountingConnection.sent == before
    assert not s.enqueue_request(Request("https://e.test/a"))  # evicted: Redis answers
    assert CountingConnection.sent - before == 1
    assert s.stats.get_value("scheduler/seen_cache") == 2  # what it holds, never above its size


def test_one_round_trip_per_pop_batch(make_scheduler: MakeScheduler) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=5, **COUNTING)
    for i in range(10):
        s.enqueue_request(Request(f"https://e.test/{i}"))
    before = CountingConnection.sent
    assert all(s.next_request() is not None for _ in range(10))
    assert CountingConnection.sent - before == 2


def test_batched_enqueues_share_one_round_trip(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(SCHEDULER_ENQUEUE_BATCH=True, SCHEDULER_PREFETCH=20, **COUNTING)
    before = CountingConnection.sent
    for i in [1, 2, 3, 2, 1, 4]:
        assert s.enqueue_request(Request(f"https://e.test/{i}"))
    assert CountingConnection.sent == before and s.has_pending_requests()
    assert s._flush_pending() == [1, 1, 1, 0, 0, 1]
    assert CountingConnection.sent - before == 1
    assert s.stats.get_value("dupefilter/filtered") == 2
    assert not s.enqueue_request(Request("https://e.test/4"))  # now known: answered at once
    assert not s._pending
    assert s.stats.get_value("scheduler/enqueued") == 4
    assert [r.url[-1] for r in drain(s)] == list("1234")


def test_two_processes_never_pop_the_same_request(
    make_scheduler: MakeScheduler, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    s = make_scheduler(SCHEDULER_QUEUE_CLASS=QUEUE % "FifoQueue")
    total = 1000
    for i in range(total):
        s.enqueue_request(Request(f"https://e.test/{i}"))
    env = {"PYTHONPATH": str(ROOT / "project")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(POP_SCRIPT), redis_url, QUEUE % "FifoQueue"],
            stdout=subprocess.PIPE,
            env=env,
            cwd=tmp_path,
        )
        for _ in range(2)
    ]
    wait_until(
        lambda: int(redis_client.get("test:ready") or 0) >= 2, "both poppers ready", interval=0.02
    )
    redis_client.set("test:go", 1)
    outputs = [set(p.communicate(timeout=60)[0].decode().split()) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outputs[0] and outputs[1]
    assert not outputs[0] & outputs[1]
    assert len(outputs[0] | outputs[1]) == total


def test_corrupted_entries_go_to_dead_letter(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(SCHEDULER_QUEUE_CLASS=QUEUE % "FifoQueue", SCHEDULER_PREFETCH=10)
    s.enqueue_request(Request("https://e.test/good1"))
    redis_client.rpush("site:requests", b"\xc1\xc1 not msgpack")
    redis_client.rpush(
        "site:requests", json.dumps({"url": "https://e.test/", "_class": "os.system"})
    )
    s.enqueue_request(Request("https://e.test/good2"))
    assert [r.url for r in drain(s)] == ["https://e.test/good1", "https://e.test/good2"]
    s.close("finished")  # dead letters are reported with the next round trip
    dead = [json.loads(e) for e in redis_client.lrange("site:deadletter", 0, -1)]
    assert [d["source"] for d in dead] == ["queue", "queue"]
    assert "undecodable" in dead[0]["reason"] and "_class" in dead[1]["reason"]
    assert s.stats.get_value("scheduler/deadletter") == 2
    assert int(redis_client.hget("site:stats", "scheduler/deadletter")) == 2
    assert redis_client.llen("site:requests") == 0
    assert not list(redis_client.scan_iter("site:leases:*"))


def test_unserializable_request_goes_to_dead_letter(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler()
    assert not s.enqueue_request(Request("https://e.test/", meta={"obj": object()}))
    assert not s.enqueue_request(Request("https://e.test/", callback=lambda r: None))
    dead = [json.loads(e) for e in redis_client.lrange("site:deadletter", 0, -1)]
    assert len(dead) == 2 and all(d["reason"].startswith("unserializable") for d in dead)
    assert len(s) == 0


def test_dead_worker_leases_are_reaped_once(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    fast = {"SCHEDULER_LEASE_TIMEOUT": 0.6, "SCHEDULER_HEARTBEAT_INTERVAL": 0.2}
    dead = make_scheduler(SCHEDULER_PREFETCH=3, **fast)
    for i in range(3):
        dead.enqueue_request(Request(f"https://e.test/{i}"))
    assert dead.next_request() is not None  # 3 leased: 1 handed out, 2 prefetched
    for loop in dead._loops:  # the worker "dies": no more heartbeats
        loop.stop()
    reapers = [make_scheduler(**fast) for _ in range(2)]
    assert reapers[0].next_request() is None  # the leases are not free before the deadline
    deadline = redis_client.zscore("site:workers", dead.worker)
    assert deadline is not None
    # Deadlines are on the Redis server's clock (one heartbeat shorter than the lease timeout).
    wait_until(lambda: redis_ms(redis_client) > deadline, "the dead worker's deadline", timeout=5)
    for reaper in reapers:
        reaper._heartbeat()
    assert int(redis_client.hget("site:stats", "scheduler/requeued")) == 3
    assert sorted(r.url for r in drain(reapers[0]) + drain(reapers[1])) == [
        f"https://e.test/{i}" for i in range(3)
    ]
    assert redis_client.zscore("site:workers", dead.worker) is None
    # the dead worker comes back: it learns its leases are gone and drops its prefetch
    dead._sync("pop", 1)
    assert dead.next_request() is None


def test_an_idle_pop_reaps_without_waiting_for_a_heartbeat(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    # Heartbeats far apart: only the idle pop can return the dead worker's leases in time.
    dead = make_scheduler(SCHEDULER_LEASE_TIMEOUT=1.5, SCHEDULER_HEARTBEAT_INTERVAL=0.5)
    assert dead.enqueue_request(Request("https://e.test/held"))
    assert dead.next_request() is not None
    for loop in dead._loops:  # the worker "dies": no more heartbeats
        loop.stop()
    idle = make_scheduler(SCHEDULER_HEARTBEAT_INTERVAL=10, SCHEDULER_IDLE_POLL_INTERVAL=0.05)
    for loop in idle._loops:  # no heartbeat of its own either: pops only
        loop.stop()
    deadline = redis_client.zscore("site:workers", dead.worker)
    assert deadline is not None
    wait_until(lambda: redis_ms(redis_client) > deadline, "the dead worker's deadline", timeout=5)
    idle._sync("pop", 1)
    assert int(redis_client.hget("site:stats", "scheduler/requeued")) == 1
    request = idle.next_request()
    assert request is not None and request.url == "https://e.test/held"
    assert redis_client.zscore("site:workers", dead.worker) is None


def test_close_returns_unprocessed_leases(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=4)
    for i in range(4):
        s.enqueue_request(Request(f"https://e.test/{i}"))
    assert s.next_request() is not None
    s.close("shutdown")
    assert redis_client.zcard("site:requests") == 3
    assert not list(redis_client.scan_iter("site:leases:*"))
    assert redis_client.zcard("site:workers") == 0
    assert redis_client.scard("site:dupefilter") == 4  # SCHEDULER_PERSIST keeps everything
    again = make_scheduler()
    assert [r.url[-1] for r in drain(again)] == ["1", "2", "3"]


def test_persist_false_clears_with_the_last_worker(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    a, b = make_scheduler(SCHEDULER_PERSIST=False), make_scheduler(SCHEDULER_PERSIST=False)
    a.enqueue_request(Request("https://e.test/1"))
    a.close("finished")
    assert redis_client.exists("site:requests", "site:dupefilter") == 2
    b.close("finished")
    assert redis_client.exists("site:requests", "site:dupefilter") == 0


def test_flush_on_start(make_scheduler: MakeScheduler, redis_client: redis.Redis) -> None:
    a = make_scheduler()
    a.enqueue_request(Request("https://e.test/1"))
    a.close("finished")
    b = make_scheduler(SCHEDULER_FLUSH_ON_START=True)
    assert b._seeding
    assert redis_client.exists("site:requests", "site:dupefilter") == 0
    assert b.enqueue_request(Request("https://e.test/1"))


def test_seeding_claimed_by_the_first_worker_only(make_scheduler: MakeScheduler) -> None:
    first, second = make_scheduler(), make_scheduler()
    assert first._seeding and not second._seeding
    start = Request("https://e.test/", dont_filter=True, meta={"is_start_request": True})
    assert first.enqueue_request(start)
    assert not second.enqueue_request(start.copy())
    assert second.stats.get_value("scheduler/start_skipped") == 1


def test_a_seeded_crawl_is_not_seeded_again_when_its_only_worker_missed_its_deadline(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    fast = {"SCHEDULER_HEARTBEAT_INTERVAL": 0.2, "SCHEDULER_LEASE_TIMEOUT": 0.6}
    seeder = make_scheduler(**fast)
    assert seeder._seeding
    start = Request("https://e.test/", dont_filter=True, meta={"is_start_request": True})
    assert seeder.enqueue_request(start)
    seeder._seed_release = True  # the engine dropped its start iterator (_check_seeding_done)
    assert [r.url for r in drain(seeder)] == ["https://e.test/"]  # handed out and done
    assert seeder._sync("beat", 0)  # its acknowledgement
    assert redis_client.get("site:seeded") == seeder.worker.encode()
    assert not redis_client.exists("site:seeding", "site:requests")
    assert redis_client.hlen(f"site:leases:{seeder.worker}") == 0
    # Under load the seeder misses its deadline (here: no heartbeat runs without a reactor);
    # a worker joining then finds the crawl empty and nobody alive but itself.
    deadline = redis_client.zscore("site:workers", seeder.worker)
    assert deadline is not None
    wait_until(lambda: redis_ms(redis_client) > deadline, "the seeder's deadline", timeout=10)
    joiner = make_scheduler(**fast)
    assert seeder.worker.encode() not in redis_client.zrange("site:workers", 0, -1)  # reaped
    assert not joiner._seeding  # before: it ran the start requests again
    assert not joiner.enqueue_request(start.copy())
    assert joiner.stats.get_value("scheduler/start_skipped") == 1
    # A worker that finishes the crawl lets its next run start again.
    joiner.close("finished")
    seeder.close("finished")
    assert not redis_client.exists("site:seeded")
    assert make_scheduler()._seeding


def test_a_crawl_stopped_before_its_end_keeps_its_mark(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    seeder = make_scheduler()
    seeder._seed_release = True
    seeder._sync("beat", 0)
    seeder.close("shutdown")  # a SIGTERM, a rolling restart: the crawl goes on later
    assert redis_client.get("site:seeded") == seeder.worker.encode()
    assert not make_scheduler()._seeding
    flushed = make_scheduler(SCHEDULER_FLUSH_ON_START=True)  # starts the crawl over
    assert not redis_client.exists("site:seeded")
    assert not flushed._seeding  # another worker lives: only a lone worker seeds


def test_start_urls_are_fed_while_crawling(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=2, REDIS_START_URLS_BATCH_SIZE=3)
    redis_client.rpush(
        "site:start_urls",
        "https://e.test/a",
        json.dumps(
            {
                "url": "https://e.test/b",
                "method": "POST",
                "body": "x",
                "meta": {"m": 1},
                "callback": "parse_page",
            }
        ),
        "https://e.test/a",  # a duplicate
        "{broken json",
        "https://e.test/c",
    )
    # Every SCHEDULER_IDLE_POLL_INTERVAL the worker looks again (no engine here).
    wait_until(s._should_pop, "the worker's next look", timeout=5, interval=0.01)
    got = drain(s)
    assert sorted(r.url for r in got) == [
        "https://e.test/a",
        "https://e.test/b",
        "https://e.test/c",
    ]
    b = next(r for r in got if r.url.endswith("/b"))
    assert b.method == "POST" and b.body == b"x" and b.meta["m"] == 1
    assert b.callback == s.spider.parse_page
    assert redis_client.llen("site:start_urls") == 0
    dead = [json.loads(e) for e in redis_client.lrange("site:deadletter", 0, -1)]
    assert [d["source"] for d in dead] == ["start_urls"] and "JSON" in dead[0]["reason"]


def test_idle_polls_back_off_and_snap_back(make_scheduler: MakeScheduler) -> None:
    # Another worker holds the only request: the crawl is busy, this worker has nothing to do.
    holder = make_scheduler()
    assert holder.enqueue_request(Request("https://e.test/held"))
    assert holder.next_request() is not None
    idle = make_scheduler(SCHEDULER_IDLE_POLL_INTERVAL=0.05, SCHEDULER_IDLE_POLL_MAX=0.3)
    waits = []
    for _ in range(5):
        wait_until(idle._should_pop, "the idle worker's next look", timeout=5, interval=0.01)
        assert idle.next_request() is None
        waits.append(idle._idle_wait)
    assert waits == [0.1, 0.2, 0.3, 0.3, 0.3]  # doubled after each empty look, up to the max
    # The queue is empty, so others' leases are counted: the crawl is not over.
    assert idle._status.leased_by_others == 1 and idle._status.leased_by_me == 0
    assert idle.has_pending_requests()
    # New work is found at the next look, and the polls are quick again.
    assert holder.enqueue_request(Request("https://e.test/new"))
    wait_until(idle._should_pop, "the idle worker's next look", timeout=5, interval=0.01)
    request = idle.next_request()
    assert request is not None and request.url == "https://e.test/new"
    assert idle._idle_wait == 0.05


def test_final_failure_and_requeue_failed(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, redis_url: str, capsys
) -> None:
    s = make_scheduler()
    s.enqueue_request(Request("https://e.test/down", priority=3))
    request = s.next_request()
    assert request is not None
    request.errback(Failure(ConnectionRefusedError("refused")))
    s.close("finished")
    failed = [json.loads(e) for e in redis_client.lrange("site:failed", 0, -1)]
    assert len(failed) == 1 and "ConnectionRefusedError" in failed[0]["reason"]
    redis_client.rpush("site:failed", "not json")
    assert cli.main(["requeue-failed", "site", "--redis-url", redis_url]) == 0
    assert "requeued 1 failed request(s)" in capsys.readouterr().out
    assert redis_client.llen("site:failed") == 0
    assert redis_client.llen("site:deadletter") == 1
    again = make_scheduler()
    back = again.next_request()
    assert back is not None and back.url == "https://e.test/down" and back.priority == 3


def test_requeue_failed_bad_input(redis_url: str, capsys) -> None:
    assert cli.main(["requeue-failed", "nobody", "--redis-url", redis_url]) == 1
    assert "no frontier metadata at nobody:frontier" in capsys.readouterr().err
    assert cli.main(["requeue-failed", "site", "--redis-url", "redis://:secret@127.0.0.1:1/0"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Redis" in err and "secret" not in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_info:  # a bad flag: argparse's status 2
        cli.main(["requeue-failed", "site", "--limit", "-1", "--redis-url", redis_url])
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"SCHEDULER_QUEUE_CLASS": "crawlfleet.frontier.queues.Missing"}, "SCHEDULER_QUEUE_CLASS"),
        ({"SCHEDULER_SERIALIZER": "pickle"}, "SCHEDULER_SERIALIZER"),
        ({"SCHEDULER_IDLE_POLL_MAX": 0}, "SCHEDULER_IDLE_POLL_MAX"),
        ({"DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter"}, "DUPEFILTER_CLASS"),
        ({"DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter"}, "DUPEFILTER_CLASS"),
    ],
)
def test_bad_settings_fail_at_start(
    redis_url: str, settings: dict[str, object], named: str
) -> None:
    crawler = get_crawler(SiteSpider, {"REDIS_URL": redis_url, **settings})
    crawler.spider = crawler._create_spider()
    with pytest.raises(FrontierConfigError, match=named):
        Scheduler.from_crawler(crawler)


def test_wrong_key_types_are_named(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.set("site:requests", "x")
    crawler = get_crawler(SiteSpider, {"REDIS_URL": redis_url})
    crawler.spider = crawler._create_spider()
    with pytest.raises(FrontierConfigError, match="SCHEDULER_QUEUE_KEY 'site:requests'"):
        Scheduler.from_crawler(crawler)
    redis_client.delete("site:requests")
    redis_client.set("site:dupefilter", "x")
    with pytest.raises(FrontierConfigError, match="SCHEDULER_DUPEFILTER_KEY 'site:dupefilter'"):
        Scheduler.from_crawler(crawler)


def test_unreachable_and_wrong_password_redis(tmp_path: Path) -> None:
    from support.net import free_port

    from redis_server import start_redis

    crawler = get_crawler(SiteSpider, {"REDIS_URL": f"redis://:pw@127.0.0.1:{free_port()}/0"})
    crawler.spider = crawler._create_spider()
    with pytest.raises(RedisConfigError) as excinfo:
        Scheduler.from_crawler(crawler)
    assert "cannot reach Redis at redis://:***@127.0.0.1" in str(excinfo.value)
    server = start_redis(tmp_path, password="right")
    try:
        url = f"redis://:wrong@127.0.0.1:{server.port}/0"
        crawler = get_crawler(SiteSpider, {"REDIS_URL": url})
        crawler.spider = crawler._create_spider()
        with pytest.raises(RedisConfigError) as excinfo:
            Scheduler.from_crawler(crawler)
        message = str(excinfo.value)
        assert "wrong" not in message and "***" in message and "\n" not in message
    finally:
        server.stop()


def test_set_dupefilter_on_its_own(redis_url: str, redis_client: redis.Redis, caplog) -> None:
    from crawlfleet.frontier.dupefilter import SetDupeFilter

    crawler = get_crawler(
        SiteSpider,
        {
            "REDIS_URL": redis_url,
            "SCHEDULER_DUPEFILTER_KEY": "df:%(spider)s",
            "DUPEFILTER_DEBUG": True,
        },
    )
    crawler.spider = crawler._create_spider()
    df = SetDupeFilter.from_crawler(crawler)
    request = Request("https://e.test/a?b=1&a=2")
    assert not df.request_seen(request)
    assert df.request_seen(Request("https://e.test/a?a=2&b=1"))  # same canonical fingerprint
    fingerprint = crawler.request_fingerprinter.fingerprint(request).hex()
    assert redis_client.smembers("df:site") == {fingerprint.encode()}
    with caplog.at_level("DEBUG"):
        df.log(request, crawler.spider)
        df.log(request, crawler.spider)
    assert caplog.text.count("Filtered duplicate request") == 2  # DUPEFILTER_DEBUG: every one
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    df.clear()
    assert not redis_client.exists("df:site")


def test_pause_hands_out_nothing_and_keeps_leases(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=2)
    for i in range(4):
        s.enqueue_request(Request(f"https://e.test/{i}"))
    assert s.next_request() is not None  # 2 leased: one handed out, one prefetched
    redis_client.set("site:paused", "{}")
    s._heartbeat()  # the worker learns of the pause with its next round trip
    assert s.next_request() is None
    assert s.has_pending_requests() and s._status.paused
    assert redis_client.hlen(f"site:leases:{s.worker}") == 1  # the prefetched one stays leased
    assert redis_client.zcard("site:requests") == 2  # nothing more was popped
    redis_client.delete("site:paused")
    s._heartbeat()  # and of the resume
    assert [r.url[-1] for r in drain(s)] == ["1", "2", "3"]
