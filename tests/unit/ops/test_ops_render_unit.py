"""Renderers of one view: the status table (rich) and the Prometheus text of /metrics."""

from __future__ import annotations

from ops_sample_view import view
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from crawlfleet.commands.status import render
from crawlfleet.dashboard import metrics


def _text(renderable: object) -> str:
    console = Console(record=True, width=160)
    console.print(renderable)
    return console.export_text()


def test_status_table_shows_every_number() -> None:
    text = _text(render(view()))
    for needle in (
        "book",
        "1,234",
        "acknowledged",
        "dead letters",
        "fill 1.23%",
        "2.5e-12",
        "progress",
        "150/9,216",
        "b:1:aa",
        "c:2:bb",
        "alive",
        "stopped",
        "120.5",
        "proxypool: 12 available",
        "accountpool (demosite): unavailable — HTTP 401",
    ):
        assert needle in text, needle


def test_status_table_of_a_paused_crawl_and_of_no_crawl() -> None:
    paused = view()
    paused["spiders"][0]["paused"] = True
    assert "paused" in _text(render(paused))
    empty = view()
    empty["spiders"], empty["pools"] = [], {}
    assert "no crawls found" in _text(render(empty))


def _families(body: bytes) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def test_metrics_are_valid_prometheus_text_with_per_worker_series() -> None:
    families = _families(metrics.render(view()))
    assert families["crawlfleet_redis_up"][0].value == 1.0
    assert families["crawlfleet_queued"][0].labels == {"spider": "book"}
    assert families["crawlfleet_bloom_fill_ratio"][0].value == 0.0123
    up = {s.labels["worker"]: s.value for s in families["crawlfleet_worker_up"]}
    assert up == {"b:1:aa": 1.0, "c:2:bb": 0.0}
    events = families["crawlfleet_worker_frontier_events"]
    assert {"spider": "book", "worker": "b:1:aa", "event": "acked"} in [s.labels for s in events]
    stats = {
        (s.labels["worker"], s.labels["stat"]): s.value
        for s in families["crawlfleet_worker_scrapy_stat"]
    }
    assert stats[("b:1:aa", "response_received_count")] == 101
    pools = {s.labels["pool"]: s.value for s in families["crawlfleet_pool_up"]}
    assert pools == {"proxypool": 1.0, "accountpool": 0.0}
    assert [s.value for s in families["crawlfleet_pool_available"]] == [12.0]


def test_metrics_without_redis_say_so() -> None:
    families = _families(metrics.render(None))
    assert list(families) == ["crawlfleet_redis_up"]
    assert families["crawlfleet_redis_up"][0].value == 0.0
