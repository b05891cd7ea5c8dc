"""A full hub in the read model and its renderings: ``hub_full``, ``oom_refusals``, the status
line, the dashboard's metrics; and the workers' episode log (``crawlfleet.hub.fullhub``)."""

from __future__ import annotations

import logging
import re

import pytest
import redis
from ops_sample_view import view
from rich.console import Console

from crawlfleet.commands.status import render
from crawlfleet.dashboard import metrics
from crawlfleet.hub.fullhub import FullHub, is_full
from crawlfleet.views.hub import hub_full, oom_refusals

MIB = 2**20


@pytest.mark.parametrize(
    ("memory", "full"),
    [
        ({"used_memory": 10 * MIB, "maxmemory": 0}, False),  # no limit
        ({"used_memory": 9 * MIB, "maxmemory": 10 * MIB}, False),
        ({"used_memory": 10 * MIB, "maxmemory": 10 * MIB}, True),
        ({"used_memory": 11 * MIB, "maxmemory": 10 * MIB, "mem_not_counted_for_evict": 0}, True),
        # replication and AOF buffers do not count toward maxmemory (as Redis counts)
        ({"used_memory": 11 * MIB, "maxmemory": 10 * MIB, "mem_not_counted_for_evict": 2 * MIB},
         False),
        ({"used_memory": "junk", "maxmemory": 10 * MIB}, False),
    ],
)  # fmt: skip
def test_hub_full_is_what_redis_refuses_at(memory: dict[str, object], full: bool) -> None:
    assert hub_full(memory) is full


def test_oom_refusals_come_from_errorstats() -> None:
    assert oom_refusals({}) == 0
    assert oom_refusals({"errorstat_ERR": {"count": 3}}) == 0
    assert oom_refusals({"errorstat_OOM": {"count": 41}, "errorstat_ERR": {"count": 3}}) == 41
    assert oom_refusals({"errorstat_OOM": "garbage"}) == 0


def _full_view() -> dict[str, object]:
    v = view()
    v["hub"].update(used_memory=11 * MIB, maxmemory=10 * MIB, full=True, oom_refusals=41)
    return v


def _text(group: object) -> str:
    console = Console(width=400, record=True)
    console.print(group)
    return console.export_text()


def test_status_says_the_hub_is_full_and_by_how_much() -> None:
    text = _text(render(_full_view()))
    assert "hub: PING 0.4 ms, CPU 25% of a core, memory 11.0 MiB of maxmemory 10.0 MiB (110%)" in (
        text
    )
    assert "hub FULL: Redis uses 11.0 MiB, 1.0 MiB over its maxmemory of 10.0 MiB" in text
    assert "41 commands refused since it started" in text
    calm = view()
    calm["hub"].update(used_memory=5 * MIB, maxmemory=10 * MIB, full=False, oom_refusals=0)
    text = _text(render(calm))
    assert "memory 5.0 MiB of maxmemory 10.0 MiB (50%)" in text and "FULL" not in text


def test_metrics_say_the_hub_is_full() -> None:
    text = metrics.render(_full_view()).decode()
    assert "crawlfleet_redis_full 1.0" in text
    assert "crawlfleet_redis_oom_refusals_total 41.0" in text
    calm = view()
    calm["hub"].update(full=False, oom_refusals=0)
    text = metrics.render(calm).decode()
    assert "crawlfleet_redis_full 0.0" in text
    calm["hub"].update(used_memory=None, maxmemory=None, full=None, oom_refusals=None)  # an ACL
    text = metrics.render(calm).decode()
    assert "\ncrawlfleet_redis_full " not in text
    assert "\ncrawlfleet_redis_oom_refusals_total " not in text


def test_only_oom_is_a_full_hub() -> None:
    oom = "command not allowed when used memory > 'maxmemory'."
    assert is_full(redis.exceptions.OutOfMemoryError(oom))
    assert not is_full(redis.ConnectionError("Connection refused"))
    assert not is_full(redis.ResponseError("NOSCRIPT No matching script"))


def test_one_episode_is_two_lines_and_retries_back_off(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.fullhub")
    hub = FullHub(log, "Frontier worker w1", retry_min=10.0, retry_max=35.0)
    hub.accepted()  # not full: nothing to say
    assert not hub.waiting()
    with caplog.at_level(logging.WARNING, logger="test.fullhub"):
        waits = []
        for _ in range(4):
            hub.refused("pop", "pausing, keeping 3 new request(s)", "redis://hub:6379/0")
            waits.append(hub.retry_wait)
            assert hub.waiting()  # the next retry is seconds away
        hub.accepted()
        hub.accepted()
        assert not hub.waiting()
        hub.refused("enqueue", "pausing, keeping 1 new request(s)", "redis://hub:6379/0")
    assert waits == [10.0, 20.0, 35.0, 35.0]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0] == (
        "Frontier worker w1: the hub's Redis at redis://hub:6379/0 is full (maxmemory reached: "
        "pop refused with OOM); pausing, keeping 3 new request(s), retrying until it has room"
    )
    assert re.fullmatch(
        r"Frontier worker w1: the hub has room again; resuming after [\d.]+ s full "
        r"\(4 write\(s\) refused\)",
        lines[1],
    )
    assert "enqueue refused with OOM" in lines[2]  # a new episode is logged again
    assert hub.retry_wait == 10.0
