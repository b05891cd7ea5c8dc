"""crawlfleet.politeness.config: defaults, per-site overrides, and one line naming the setting for
every value that cannot work (Hypothesis over hostile values)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy.settings import Settings

from crawlfleet.politeness.budget import classify, retry_after_seconds
from crawlfleet.politeness.config import Limits, PolitenessConfig, PolitenessConfigError


def config(**values: object) -> PolitenessConfig:
    return PolitenessConfig.from_settings(Settings(values), "book")


def test_defaults_are_the_documented_ones() -> None:
    c = config()
    assert c.enabled and c.key_kind == "host" and c.namespace == "book"
    # no ceiling: each key learns its own
    assert c.limits == Limits(rate=1.0, min_rate=0.1, max_rate=math.inf, burst=1)
    assert c.ban_statuses == {403, 429, 503} and c.ban_markers == ()
    assert (c.backoff, c.growth, c.probe, c.window, c.cooldown) == (0.5, 2.0, 0.05, 2.0, 20.0)
    assert (c.probe_interval, c.precision, c.latency_factor) == (120.0, 0.1, 3.0)
    assert (c.memory, c.max_keys) == (7 * 86400.0, 100_000)
    assert (c.lease_size, c.lease_horizon, c.gc_freeze) == (8, 1.0, True)
    assert c.limits_for("example.com") == c.limits


def test_derived_defaults_follow_the_rate_and_sites_widen_them() -> None:
    c = config(
        POLITENESS_RATE="20",
        POLITENESS_KEY="Domain",
        POLITENESS_BAN_STATUSES="429, 503",
        POLITENESS_BAN_MARKERS=["Access denied", "captcha"],
        POLITENESS_SITES=json.dumps({"Slow.example": 0.5, "fast.example": {"rate": 200}}),
        POLITENESS_NAMESPACE="fleet",
    )
    assert c.limits == Limits(20.0, 2.0, math.inf, 1) and c.key_kind == "domain"
    assert c.ban_statuses == {429, 503} and c.ban_markers == (b"Access denied", b"captcha")
    assert c.limits_for("slow.example") == Limits(0.5, 0.5, math.inf, 1)
    assert c.limits_for("fast.example") == Limits(200.0, 2.0, math.inf, 1)
    assert c.namespace == "fleet"
    site = config(POLITENESS_SITES={"a.example": {"rate": 3, "min_rate": 1, "burst": 4}})
    assert site.limits_for("a.example") == Limits(3.0, 1.0, math.inf, 4)
    # a site's cap alone: it starts at the default rate (or the cap, when lower) and never
    # passes the cap; a cap for every site starts them no higher than it
    capped = config(POLITENESS_SITES={"a.example": {"max_rate": 0.5}, "b.example": {"max_rate": 9}})
    assert capped.limits_for("a.example") == Limits(0.5, 0.1, 0.5, 1)
    assert capped.limits_for("b.example") == Limits(1.0, 0.1, 9.0, 1)
    assert config(POLITENESS_MAX_RATE=0.5).limits == Limits(0.5, 0.05, 0.5, 1)
    assert config(POLITENESS_MAX_RATE=0).limits.max_rate == math.inf


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"POLITENESS_KEY": "url"}, "POLITENESS_KEY must be one of host, domain, ip, got 'url'"),
        ({"POLITENESS_RATE": -1}, "POLITENESS_RATE must be > 0, got -1"),
        ({"POLITENESS_RATE": "nan"}, "POLITENESS_RATE must be a finite number, got 'nan'"),
        ({"POLITENESS_RATE": True}, "POLITENESS_RATE must be a number, got True"),
        ({"POLITENESS_MIN_RATE": 0}, "POLITENESS_MIN_RATE must be > 0, got 0"),
        (
            {"POLITENESS_MIN_RATE": 5, "POLITENESS_MAX_RATE": 2},
            "POLITENESS_MIN_RATE (5) must not exceed POLITENESS_MAX_RATE (2)",
        ),
        (
            {"POLITENESS_RATE": 9, "POLITENESS_MAX_RATE": 2},
            "POLITENESS_RATE (9) must lie between POLITENESS_MIN_RATE (0.9) and "
            "POLITENESS_MAX_RATE (2)",
        ),
        (
            {"POLITENESS_BURST": 0},
            "POLITENESS_BURST must be a whole number from 1 to 1000000, got 0",
        ),
        ({"POLITENESS_BURST": 1.5}, "POLITENESS_BURST must be a whole number > 0, got 1.5"),
        (
            {"POLITENESS_BACKOFF": 1},
            "POLITENESS_BACKOFF must be a fraction above 0 and below 1, got 1",
        ),
        ({"POLITENESS_PROBE": -0.1}, "POLITENESS_PROBE must be > 0, got -0.1"),
        # the old meaning (requests/s) is refused, not read as 100 %
        ({"POLITENESS_PROBE": 1}, "POLITENESS_PROBE must be a fraction above 0 and below 1"),
        ({"POLITENESS_GROWTH": 1}, "POLITENESS_GROWTH must be above 1 and at most 10, got 1"),
        ({"POLITENESS_GROWTH": "fast"}, "POLITENESS_GROWTH must be a number, got 'fast'"),
        ({"POLITENESS_PRECISION": 0}, "POLITENESS_PRECISION must be > 0, got 0"),
        ({"POLITENESS_PROBE_INTERVAL": 0}, "POLITENESS_PROBE_INTERVAL must be > 0, got 0"),
        (
            {"POLITENESS_LATENCY_FACTOR": 0.5},
            "POLITENESS_LATENCY_FACTOR must be above 1 (or 0: off), got 0.5",
        ),
        ({"POLITENESS_MEMORY": -1}, "POLITENESS_MEMORY must be > 0, got -1"),
        (
            {"POLITENESS_MAX_KEYS": 0},
            "POLITENESS_MAX_KEYS must be a whole number from 1 to 1000000, got 0",
        ),
        ({"POLITENESS_MAX_RATE": -2}, "POLITENESS_MAX_RATE must be >= 0, got -2"),
        (
            {"POLITENESS_SITES": {"a.example": {}}},
            "POLITENESS_SITES['a.example'] is empty (give rate, min_rate, max_rate, burst)",
        ),
        ({"POLITENESS_COOLDOWN": "inf"}, "POLITENESS_COOLDOWN must be a finite number, got 'inf'"),
        (
            {"POLITENESS_BAN_STATUSES": "429,abc"},
            "POLITENESS_BAN_STATUSES must list HTTP statuses (100-599), got 'abc'",
        ),
        (
            {"POLITENESS_BAN_MARKERS": [""]},
            "POLITENESS_BAN_MARKERS must list non-empty strings, got ''",
        ),
        ({"POLITENESS_SITES": "{"}, "POLITENESS_SITES is not valid JSON: "),
        ({"POLITENESS_SITES": [1]}, "POLITENESS_SITES must be a dict site -> rate, got [1]"),
        ({"POLITENESS_SITES": {"a b": 1}}, "POLITENESS_SITES: 'a b' is not a host name"),
        (
            {"POLITENESS_SITES": {"a": {"rate": 1, "delay": 2}}},
            "POLITENESS_SITES['a']: unknown field 'delay' (use rate, min_rate, max_rate, burst)",
        ),
        ({"POLITENESS_SITES": {"a": -2}}, "POLITENESS_SITES['a']['rate'] must be > 0, got -2"),
        (
            {"POLITENESS_SITES": {"a": {"rate": 5, "max_rate": 1}}},
            "POLITENESS_SITES['a']: rate 5 must lie between min_rate 0.1 and max_rate 1",
        ),
    ],
)
def test_nonsense_is_one_line_naming_the_setting(values: dict[str, object], message: str) -> None:
    with pytest.raises(PolitenessConfigError) as excinfo:
        config(**values)
    text = str(excinfo.value)
    assert "\n" not in text and text.startswith(message)


NAMES = [
    "POLITENESS_RATE",
    "POLITENESS_MIN_RATE",
    "POLITENESS_MAX_RATE",
    "POLITENESS_BURST",
    "POLITENESS_BACKOFF",
    "POLITENESS_PROBE",
    "POLITENESS_WINDOW",
    "POLITENESS_COOLDOWN",
    "POLITENESS_LEASE_SIZE",
    "POLITENESS_LEASE_HORIZON",
    "POLITENESS_KEY",
    "POLITENESS_BAN_STATUSES",
    "POLITENESS_BAN_MARKERS",
    "POLITENESS_SITES",
    "POLITENESS_ENABLED",
    "POLITENESS_GC_FREEZE",
    "POLITENESS_GROWTH",
    "POLITENESS_PRECISION",
    "POLITENESS_PROBE_INTERVAL",
    "POLITENESS_LATENCY_FACTOR",
    "POLITENESS_MEMORY",
    "POLITENESS_MAX_KEYS",
]
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.binary(max_size=10),
    st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=4),
    st.dictionaries(st.text(max_size=5), st.one_of(st.floats(), st.text(max_size=5)), max_size=3),
)


@pytest.mark.fuzz
@given(name=st.sampled_from(NAMES), value=HOSTILE)
def test_hostile_values_give_a_config_or_one_line_naming_the_setting(
    name: str, value: object
) -> None:
    try:
        c = config(**{name: value})
    except PolitenessConfigError as exc:
        text = str(exc)
        assert "\n" not in text
        assert text.startswith(name), text
        return
    limits = [c.limits, *c.sites.values()]
    for lim in limits:
        assert all(math.isfinite(v) and v > 0 for v in (lim.rate, lim.min_rate))
        assert lim.max_rate > 0 and not math.isnan(lim.max_rate)
        assert lim.min_rate <= lim.rate <= lim.max_rate and lim.burst >= 1
    assert 0 < c.backoff < 1 and c.lease_size >= 1 and c.lease_horizon > 0
    assert 1 < c.growth <= 10 and 0 < c.probe < 1 and 0 < c.precision < 1
    assert c.latency_factor == 0 or c.latency_factor > 1
    assert math.isfinite(c.memory) and c.memory > 0 and c.max_keys >= 1


@pytest.mark.fuzz
@given(
    markers=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4),
    body=st.binary(max_size=200),
    status=st.integers(min_value=100, max_value=599),
)
def test_a_ban_is_a_ban_status_or_a_marker_in_the_body(
    markers: list[str], body: bytes, status: int
) -> None:
    c = config(POLITENESS_BAN_MARKERS=markers)
    encoded = [m.encode("utf-8", "surrogatepass") for m in markers]
    expected = status in {403, 429, 503} or any(m in body for m in encoded)
    assert classify(c, status, body).ban is expected
    assert classify(c, 200, body + encoded[0]).ban


def test_retry_after_is_seconds_or_an_http_date() -> None:
    assert retry_after_seconds("120") == 120.0
    assert retry_after_seconds(b" 7 ") == 7.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert retry_after_seconds("soon") == 0.0
    assert retry_after_seconds(None) == 0.0
    assert retry_after_seconds("99999999") == 86400.0
    c = config()
    assert classify(c, 429, retry_after="3").retry_after == 3.0
    assert classify(c, 200, retry_after="3").retry_after == 0.0
