"""The read model's pure parts: samples, rates, throughput series, glob escaping, pool errors."""

from __future__ import annotations

import socket

import pytest

from crawlfleet.hub.keys import SpiderKeys, escape_glob
from crawlfleet.views.pools import PoolConfig, pool_counts
from crawlfleet.views.series import parse_samples, rate_per_minute, throughput_series


def samples(*points: tuple[float, float]) -> list[tuple[float, list[float]]]:
    return [(t, [v, 0.0]) for t, v in points]


def test_parse_samples_sorts_and_skips_junk() -> None:
    raw = [b"2000 5 1", "1000 2 0", b"garbage", b"3000 x 1", b""]
    assert parse_samples(raw) == [(1.0, [2.0, 0.0]), (2.0, [5.0, 1.0])]


def test_rate_needs_two_samples() -> None:
    assert rate_per_minute([], 10.0) is None
    assert rate_per_minute(samples((1.0, 5)), 1.0) is None


def test_rate_over_the_last_minute_uses_the_sample_a_window_back() -> None:
    # 1 page/s for two minutes, then 3 pages/s for the last minute.
    points = [(float(t), float(t)) for t in range(0, 121, 10)]
    points += [(float(t), 120 + 3.0 * (t - 120)) for t in range(130, 181, 10)]
    assert rate_per_minute(samples(*points), 180.0) == pytest.approx(180.0)


def test_rate_of_a_young_worker_extrapolates_its_first_seconds() -> None:
    assert rate_per_minute(samples((0.0, 0), (10.0, 20)), 10.0) == pytest.approx(120.0)


def test_a_silent_worker_has_rate_zero_and_a_reset_counts_zero() -> None:
    assert rate_per_minute(samples((0.0, 0), (10.0, 20)), 100.0) == 0.0
    assert rate_per_minute(samples((0.0, 50), (10.0, 3)), 10.0) == 0.0
    assert rate_per_minute(samples((5.0, 1), (5.0, 2)), 5.0) is None


def test_throughput_series_is_per_minute_between_samples() -> None:
    series = throughput_series(samples((0.0, 0), (10.0, 10), (20.0, 10), (20.0, 11), (30.0, 5)))
    assert series == [[10.0, 60.0], [20.0, 0.0], [30.0, 0.0]]


@pytest.mark.parametrize(
    ("name", "pattern"),
    [("book", "book"), ("a*b", "a\\*b"), ("x?[y]", "x\\?\\[y\\]"), ("back\\", "back\\\\")],
)
def test_escape_glob(name: str, pattern: str) -> None:
    assert escape_glob(name) == pattern


def test_key_names() -> None:
    assert SpiderKeys("book").paused == "book:paused"
    assert SpiderKeys("book").ops_series("h:1:a") == "book:ops:series:h:1:a"
    assert SpiderKeys("book").ops_queue == "book:ops:queue"


def test_pools_not_configured_are_left_out_and_errors_never_raise() -> None:
    assert pool_counts(PoolConfig()) == {}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connection refused
        config = PoolConfig(
            proxypool_url=f"http://127.0.0.1:{port}",
            accountpool_url=f"http://127.0.0.1:{port}/",
            accountpool_site="books",
        )
        counts = pool_counts(config)
    assert counts["proxypool"]["count"] is None and counts["proxypool"]["error"]
    assert counts["accountpool"]["site"] == "books"
    assert counts["accountpool"]["url"].endswith("/books/count")
