"""A hub that does not answer (a real redis-server paused with SIGSTOP, or stopped and started
again on the same port): the worker gets no new slots, asks again after a growing pause instead of
hammering the hub, and does not burst when the hub answers again."""

from __future__ import annotations

import math
import os
import signal

import pytest
import redis

from crawlfleet.politeness.budget import HUB_RETRY_MAX, Budget
from crawlfleet.politeness.config import Limits, PolitenessConfig

from redis_server import RedisServer

RATE = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def drive(b: Budget, clock: Clock, seconds: float) -> list[float]:
    """Ask for a slot every 10 ms of the clock for ``seconds``; the times slots were used."""
    used = []
    end = clock.now + seconds
    while clock.now < end:
        if b.acquire("site.example") == 0:
            used.append(clock.now)
        clock.now = round(clock.now + 0.01, 6)
    return used


def most_in(times: list[float], width: float) -> int:
    return max((sum(1 for u in times if t <= u < t + width) for t in times), default=0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["pause", "restart"])
def test_no_answer_backs_off_and_no_burst_after(own_redis: RedisServer, fault: str) -> None:
    client = redis.Redis.from_url(own_redis.url, socket_timeout=0.2, socket_connect_timeout=0.2)
    clock = Clock()
    config = PolitenessConfig(limits=Limits(RATE, 1, 20, 2), lease_size=8, namespace="t")
    b = Budget(client, config, clock=clock)
    before = drive(b, clock, 2)
    assert len(before) >= 2 * RATE
    pid = own_redis.process.pid
    if fault == "pause":
        os.kill(pid, signal.SIGSTOP)
    else:
        own_redis.stop()
    try:
        during = drive(b, clock, 20)
        errors = b.stats["hub_errors"]
    finally:
        if fault == "pause":
            os.kill(pid, signal.SIGCONT)
        else:
            own_redis.start()
    # only slots held before the hub went away are used; the hub is asked about
    # log2(max / min) times, then every HUB_RETRY_MAX seconds
    assert len(during) <= config.lease_size
    assert 2 <= errors <= 6 + math.ceil(20 / HUB_RETRY_MAX)
    after = drive(b, clock, 3 + HUB_RETRY_MAX)
    assert b.stats["hub_errors"] == errors
    assert len(after) >= 2.5 * RATE  # the crawl resumes at the rate ...
    first = after[0]
    assert sum(1 for t in after if t < first + 0.1) <= 2  # ... with at most the burst at once
    assert most_in(after, 1.0) <= math.ceil(RATE) + 2
