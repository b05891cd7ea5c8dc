"""The scheduler on ``KeyedPriorityQueue`` (a queue per politeness key), on a real redis-server,
driven directly: it is the default when politeness is on (an explicit SCHEDULER_QUEUE_CLASS wins),
a crawl queued by PriorityQueue is refused in one line saying what to do, a pop spreads over the
sites and a look further skips the sites the worker holds, closing and ``requeue-failed`` put
requests back into their own site's queue, and ``crawlfleet status`` counts what is queued."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import redis
from scrapy import Request
from scrapy.utils.test import get_crawler
from support.schedulers import MakeScheduler, SiteSpider
from twisted.python.failure import Failure

from crawlfleet import cli
from crawlfleet.frontier.config import FrontierConfigError
from crawlfleet.frontier.queues import KeyedPriorityQueue, PriorityQueue
from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.views.crawl import spider_snapshot

POLITE = {"DOWNLOADER_MIDDLEWARES": {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750}}


@pytest.fixture
def scheduler_defaults() -> dict[str, object]:
    return POLITE


def sites_of(requests: list[Request]) -> Counter[str]:
    return Counter(r.url.split("/")[2] for r in requests)


def test_the_default_with_politeness_and_what_wins(make_scheduler: MakeScheduler) -> None:
    assert type(make_scheduler().queue) is KeyedPriorityQueue
    # the class-path lines alone: refused, saying how to turn the budget on (or off)
    with pytest.raises(FrontierConfigError, match="politeness budget is off"):
        make_scheduler(DOWNLOADER_MIDDLEWARES={}, POLITENESS_ENABLED=True)
    assert type(make_scheduler(POLITENESS_ENABLED=False).queue) is PriorityQueue
    explicit = make_scheduler(SCHEDULER_QUEUE_CLASS="crawlfleet.frontier.queues.PriorityQueue")
    assert type(explicit.queue) is PriorityQueue


def test_a_priority_queue_crawl_is_refused_in_one_line(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.zadd("site:requests", {b"0000000000000001old": 0})
    crawler = get_crawler(SiteSpider, {"REDIS_URL": redis_url, **POLITE})
    crawler.spider = crawler._create_spider()
    with pytest.raises(FrontierConfigError) as info:
        Scheduler.from_crawler(crawler)
    message = str(info.value)
    assert "\n" not in message and message.startswith("SCHEDULER_QUEUE_KEY 'site:requests'")
    assert "SCHEDULER_QUEUE_CLASS = 'crawlfleet.frontier.queues.PriorityQueue'" in message
    assert redis_client.zcard("site:requests") == 1  # nothing touched


def test_pops_spread_over_sites_and_look_further_skips_the_held_ones(
    make_scheduler: MakeScheduler, redis_client: redis.Redis
) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=4, POLITENESS_KEY="domain")
    for i in range(6):
        s.enqueue_request(Request(f"https://www.slow.example.com/{i}"))
    for i in range(3):
        s.enqueue_request(Request(f"https://fast.example.org/{i}", priority=i))
    assert redis_client.hget("site:frontier", "politeness_key") == b"domain"
    assert sorted(redis_client.zrange("site:requests:ready", 0, -1)) == [
        b"example.com",
        b"example.org",
    ]
    s._sync("pop", 4)
    popped = [lease.request for lease in s._buffer if lease.request is not None]
    assert sites_of(popped) == {"www.slow.example.com": 2, "fast.example.org": 2}
    assert [r.url for r in popped if "fast" in r.url] == [
        "https://fast.example.org/2",
        "https://fast.example.org/1",
    ]
    # the worker keeps only example.com's requests and asks for more: only example.org's come
    for lease in [lease for lease in s._buffer if "fast" in lease.request.url]:  # type: ignore[union-attr]
        s._buffer.remove(lease)
    assert s._look_further()
    held = [lease.request.url for lease in s._buffer]  # type: ignore[union-attr]
    assert held[-1] == "https://fast.example.org/0"
    # nothing else queued: no round trip until an idle poll interval has passed
    assert not s._look_further()
    assert redis_client.hget("site:requests", "len") == b"4"


def test_close_and_requeue_failed_put_requests_back_into_their_site(
    make_scheduler: MakeScheduler, redis_client: redis.Redis, redis_url: str, capsys
) -> None:
    s = make_scheduler(SCHEDULER_PREFETCH=4)
    s.enqueue_request(Request("https://down.example/x", priority=3))
    for i in range(3):
        s.enqueue_request(Request(f"https://up.example/{i}"))
    request = s.next_request()
    assert request is not None and request.url == "https://down.example/x"
    request.errback(Failure(ConnectionRefusedError("refused")))
    s.close("finished")  # the three buffered ones go back
    assert redis_client.hget("site:requests", "len") == b"3"
    assert redis_client.zcard("site:requests:site:up.example") == 3
    assert not list(redis_client.scan_iter("site:leases:*"))
    failed = [json.loads(e) for e in redis_client.lrange("site:failed", 0, -1)]
    assert len(failed) == 1 and failed[0]["url"] == "https://down.example/x"
    assert cli.main(["requeue-failed", "site", "--redis-url", redis_url]) == 0
    assert "requeued 1 failed request(s) of site into site:requests" in capsys.readouterr().out
    assert redis_client.zcard("site:requests:site:down.example") == 1
    view = spider_snapshot(redis_client, "site")
    assert view["queued"] == 4 and view["queue_class"] == "KeyedPriorityQueue"
    again = make_scheduler()
    again._sync("pop", 8)
    out = [lease.request for lease in again._buffer if lease.request is not None]
    assert sites_of(out) == {"down.example": 1, "up.example": 3}
    assert next(r for r in out if "down" in r.url).priority == 3
    assert spider_snapshot(redis_client, "site")["queued"] == 0
