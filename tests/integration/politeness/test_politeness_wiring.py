"""The pacer wired into a crawl, on a real redis-server with an injected clock: the frontier
scheduler serves keys by their next slot (looking further into the queue, keeping order within a
key, keeping its leases, losing nothing; on both queue backends, Redis and a real RabbitMQ), and
the PolitenessMiddleware gives slots, records bans, reads robots.txt's Crawl-delay and keeps the
start-up heap out of the garbage collector while a crawl runs. Components are built the way Scrapy
builds them (get_crawler)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest
import redis
from scrapy import Request, Spider, signals
from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest
from scrapy.http import TextResponse
from scrapy.utils.test import get_crawler
from support.backends import Backend, ready_messages
from support.waiting import wait_until

from crawlfleet.frontier.base import FrontierScheduler
from crawlfleet.frontier.config import FrontierConfigError
from crawlfleet.frontier.rabbitmq.scheduler import RabbitMQScheduler as RabbitScheduler
from crawlfleet.frontier.scheduler import Scheduler
from crawlfleet.politeness.budget import Budget
from crawlfleet.politeness.middleware import PolitenessMiddleware
from crawlfleet.politeness.pacer import META_KEY, META_SLOT, Pacer

MIDDLEWARE = {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750}


class SiteSpider(Spider):
    name = "site"


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def settings(redis_url: str, **extra: object) -> dict[str, object]:
    return {
        "REDIS_URL": redis_url,
        "DOWNLOADER_MIDDLEWARES": MIDDLEWARE,
        "SCHEDULER_HEARTBEAT_INTERVAL": 10,
        "POLITENESS_RATE": 1,
        "POLITENESS_MAX_RATE": 1,
        "POLITENESS_LEASE_SIZE": 1,
        **extra,
    }


def with_clock(pacer: Pacer | None, clock: Clock) -> Pacer:
    assert pacer is not None
    return Pacer(Budget(pacer.budget.client, pacer.config, clock=clock))


@pytest.fixture
def scheduler(backend: Backend) -> Iterator[FrontierScheduler]:
    options = settings(backend.redis_url, SCHEDULER_PREFETCH=2, POLITENESS_LOOKAHEAD=4)
    options.update(SCHEDULER_LEASE_TIMEOUT=30, SCHEDULER_HEARTBEAT_INTERVAL=1)
    crawler = get_crawler(SiteSpider, backend.settings(**options))
    crawler.spider = crawler._create_spider()
    built = Scheduler.from_crawler(crawler)
    built.open(crawler.spider)
    yield built
    built._stop_loops()


def held_by_the_worker(backend: Backend, scheduler: FrontierScheduler) -> bool:
    """Whether every buffered request is still the worker's: leased (Redis), or delivered and
    not acknowledged (RabbitMQ: none is ready on the broker)."""
    if backend.name == "rabbitmq":
        return ready_messages(backend.rabbit_url, backend.queue) == 0
    client = redis.Redis.from_url(backend.redis_url)
    held = {k.decode() for k in client.hkeys(scheduler.keys.leases(scheduler.worker))}
    client.close()
    return {lease.lease_id for lease in scheduler._buffer} <= held


def test_the_scheduler_serves_the_key_that_is_due_and_keeps_order_within_a_key(
    scheduler: FrontierScheduler, backend: Backend
) -> None:
    clock = Clock()
    scheduler.pacer = with_clock(scheduler.pacer, clock)
    for name, priority in (("a1", 5), ("a2", 4), ("a3", 3), ("b1", 0)):
        host = name[0]
        scheduler.enqueue_request(Request(f"http://{host}.example/{name}", priority=priority))
    if backend.name == "rabbitmq":  # the broker delivers in the background
        assert isinstance(scheduler, RabbitScheduler)
        client = scheduler.queue.client
        wait_until(lambda: len(client.deliveries) == 4, what="the broker to deliver all four")
    first = scheduler.next_request()
    assert first is not None and first.url.endswith("/a1")
    assert first.meta[META_SLOT] == "a.example"
    # a.example's next slot is a second away: the scheduler looks further and serves b.example
    second = scheduler.next_request()
    assert second is not None and second.url.endswith("/b1")
    assert scheduler.next_request() is None
    assert scheduler._wake_call is not None and scheduler._wake_call.active()
    assert [lease.request.url[-2:] for lease in scheduler._buffer if lease.request] == ["a2", "a3"]
    # the waiting requests stay this worker's
    assert held_by_the_worker(backend, scheduler)
    handed = []
    for _ in range(2):
        clock.now += 1.0
        request = scheduler.next_request()
        assert request is not None
        handed.append(request.url[-2:])
        assert scheduler.next_request() is None
    assert handed == ["a2", "a3"]
    # nothing lost, nothing left: each request was handed out once, then acknowledged at close
    assert scheduler.stats.get_value("scheduler/dequeued") == 4
    scheduler.close("finished")
    backend.assert_drained()


def test_without_the_middleware_the_scheduler_refuses_in_one_line(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The scrapy-redis class-path lines alone would crawl unpaced: refused, saying how."""
    crawler = get_crawler(SiteSpider, {**settings(redis_url), "DOWNLOADER_MIDDLEWARES": {}})
    crawler.spider = crawler._create_spider()
    with pytest.raises(FrontierConfigError, match="politeness budget is off"):
        Scheduler.from_crawler(crawler)
    line = [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"][-1]
    assert line.startswith("Frontier cannot start: the cluster's politeness budget is off")
    assert "PolitenessMiddleware': 750" in line and "POLITENESS_ENABLED = False" in line
    assert "\n" not in line
    # said on purpose, the frontier runs without the budget
    off = {**settings(redis_url), "DOWNLOADER_MIDDLEWARES": {}, "POLITENESS_ENABLED": False}
    crawler = get_crawler(SiteSpider, off)
    crawler.spider = crawler._create_spider()
    assert Scheduler.from_crawler(crawler).pacer is None


def middleware(redis_url: str, clock: Clock, **extra: object) -> PolitenessMiddleware:
    crawler = get_crawler(SiteSpider, settings(redis_url, **extra))
    crawler.spider = crawler._create_spider()
    mw = PolitenessMiddleware.from_crawler(crawler)
    mw.pacer = with_clock(mw.pacer, clock)
    return mw


def stat(mw: PolitenessMiddleware, name: str) -> int:
    return int(mw.stats.get_value(f"politeness/{name}", 0))


def test_the_middleware_takes_slots_for_requests_without_a_valid_one(redis_url: str) -> None:
    clock = Clock()
    mw = middleware(redis_url, clock)
    fresh = Request("http://c.example/1")
    Pacer.mark(fresh, "c.example", None, until=clock.now + 1)
    asyncio.run(mw.process_request(fresh))
    assert stat(mw, "slots/scheduler") == 1 and fresh.meta[META_KEY] == "c.example"
    # a scheduler slot whose window passed (the request waited elsewhere): a new slot is taken
    late = Request("http://d.example/1")
    Pacer.mark(late, "d.example", None, until=clock.now - 0.1)
    asyncio.run(mw.process_request(late))
    assert (stat(mw, "slots/stale"), stat(mw, "slots/middleware")) == (1, 1)
    # no slot at all (robots.txt, engine.download): taken here too
    asyncio.run(mw.process_request(Request("http://e.example/robots.txt")))
    assert stat(mw, "slots/middleware") == 2


def test_the_middleware_records_bans_and_reads_crawl_delay(redis_url: str) -> None:
    clock = Clock()
    mw = middleware(redis_url, clock, ROBOTSTXT_OBEY=True)
    proxy = "http://127.0.0.1:9001"
    banned = Request("http://f.example/1", meta={"proxy": proxy})
    asyncio.run(mw.process_request(banned))
    key = banned.meta[META_KEY]
    assert key == f"f.example@{proxy}"
    response = TextResponse(banned.url, status=429, headers={"Retry-After": "5"}, request=banned)
    assert mw.process_response(banned, response) is response
    state = mw.pacer.budget.state(key)
    # the site said when to come back: the pair rests that long (not POLITENESS_COOLDOWN)
    assert state.bans == 1 and state.cooldown == pytest.approx(5)
    assert stat(mw, "responses/banned") == 1
    robots = Request("http://f.example/robots.txt")
    asyncio.run(mw.process_request(robots))
    body = b"User-agent: *\nCrawl-delay: 4\nDisallow: /private\n"
    mw.process_response(robots, TextResponse(robots.url, body=body, request=robots))
    assert mw.pacer.budget.state("f.example").cap == pytest.approx(0.25)
    assert mw.stats.get_value("politeness/crawl_delay/f.example") == 4.0
    assert stat(mw, "responses/ok") == 1


def test_the_heap_is_frozen_while_a_paced_crawl_runs(redis_url: str) -> None:
    """POLITENESS_GC_FREEZE: full collections skip what was alive at the start (they stalled the
    reactor past slots' windows); thawed when the process's last such crawl closes."""
    clock = Clock()
    assert gc.get_freeze_count() == 0
    first, second = middleware(redis_url, clock), middleware(redis_url, clock)
    off = middleware(redis_url, clock, POLITENESS_GC_FREEZE=False)
    off.crawler.signals.send_catch_log(signals.spider_opened, spider=off.crawler.spider)
    assert gc.get_freeze_count() == 0
    first.crawler.signals.send_catch_log(signals.spider_opened, spider=first.crawler.spider)
    frozen = gc.get_freeze_count()
    assert frozen > 1000
    second.crawler.signals.send_catch_log(signals.spider_opened, spider=second.crawler.spider)
    first.crawler.signals.send_catch_log(signals.spider_closed, spider=first.crawler.spider)
    assert gc.get_freeze_count() >= frozen  # the second crawl still runs
    first.crawler.signals.send_catch_log(signals.spider_closed, spider=first.crawler.spider)
    second.crawler.signals.send_catch_log(signals.spider_closed, spider=second.crawler.spider)
    assert gc.get_freeze_count() == 0
    off.crawler.signals.send_catch_log(signals.spider_closed, spider=off.crawler.spider)
    assert gc.get_freeze_count() == 0


def test_a_ban_page_is_retried_never_parsed_and_given_up_past_its_retries(
    redis_url: str,
) -> None:
    """A 200 whose body holds a ban marker: a ban on the key, and the request retried (the
    spider never sees the page); past RETRY_TIMES it is given up as a failed download."""
    clock = Clock()
    marker = "Access denied: this address sent too many requests"
    mw = middleware(redis_url, clock, POLITENESS_BAN_MARKERS=[marker], RETRY_TIMES=1)
    page = Request("http://g.example/1")
    asyncio.run(mw.process_request(page))
    body = f"<html><h1>{marker}</h1></html>".encode()
    retried = mw.process_response(page, TextResponse(page.url, body=body, request=page))
    assert isinstance(retried, Request) and retried.url == page.url and retried.dont_filter
    assert retried.meta["retry_times"] == 1
    assert mw.pacer.budget.state("g.example").bans == 1
    assert stat(mw, "responses/ban_page") == 1
    with pytest.raises(IgnoreRequest, match="a ban page"):
        mw.process_response(retried, TextResponse(page.url, body=body, request=retried))
    # a clean page goes to the spider; dont_retry is honoured
    ok = TextResponse(page.url, body=b"<html>books</html>", request=page)
    assert mw.process_response(page, ok) is ok
    kept = Request("http://k.example/2", meta={"dont_retry": True})  # g.example rests now
    asyncio.run(mw.process_request(kept))
    with pytest.raises(IgnoreRequest):
        mw.process_response(kept, TextResponse(kept.url, body=body, request=kept))


def test_response_times_and_timeouts_reach_the_key(redis_url: str) -> None:
    clock = Clock()
    mw = middleware(redis_url, clock, DOWNLOAD_TIMEOUT=7)
    request = Request("http://h.example/1", meta={"download_latency": 0.25})
    asyncio.run(mw.process_request(request))
    mw.process_response(request, TextResponse(request.url, body=b"x", request=request))
    mw.process_exception(request, DownloadTimeoutError("took too long"))
    mw.process_exception(request, ValueError("not a timeout"))
    # sent with the key's next lease: 0.25 s and the 7 s timeout, two samples
    assert mw.pacer.budget._lat["h.example"] == (7250.0, 2)
    assert stat(mw, "responses/timeout") == 1
