"""crawlfleet.jobs.timespec: `--every` durations and `--cron` expressions, and when a schedule
fires next (the catch-up rule), with Hypothesis for the parsers' whole input space."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlfleet.jobs.timespec import (
    MAX_EVERY,
    UNITS,
    TimeSpecError,
    check_cron,
    next_fire,
    parse_every,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6h", 21600), ("30m", 1800), ("1h30m", 5400), ("90s", 90), ("2d", 172800), (" 6H ", 21600)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_every(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("6", "--every '6' is not a duration: write it like 6h, 30m, 1h30m, 90s or 2d"),
        ("6x", "--every '6x' is not a duration"),
        ("-1h", "is not a duration"),
        ("1.5h", "is not a duration"),
        ("", "is not a duration"),
        ("0s", "--every '0s' must be between 1 second and 366 days"),
        ("367d", "must be between 1 second and 366 days"),
    ],
)
def test_bad_durations_are_one_line(text: str, message: str) -> None:
    with pytest.raises(TimeSpecError) as excinfo:
        parse_every(text)
    assert message in str(excinfo.value) and "\n" not in str(excinfo.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 3 * *", "must have five fields (minute hour day month weekday)"),
        ("0 3 * * * *", "must have five fields"),
        ("61 * * * *", "--cron '61 * * * *' does not parse: Bad minute"),
        ("* 24 * * *", "does not parse: Bad hour"),
        ("0 3 31 2 *", "does not parse"),
        ("a b c d e", "does not parse"),
    ],
)
def test_bad_cron_is_one_line(text: str, message: str) -> None:
    with pytest.raises(TimeSpecError) as excinfo:
        check_cron(text)
    assert message in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_cron_fires_at_its_next_time_in_utc() -> None:
    assert check_cron(" 0  3 * * * ") == "0 3 * * *"
    assert next_fire(now=T0, cron="0 3 * * *") == T0 + 3 * 3600
    assert next_fire(now=T0 + 3 * 3600, cron="0 3 * * *") == T0 + 27 * 3600  # strictly after
    assert next_fire(now=T0 + 1, cron="*/15 * * * *") == T0 + 900


def test_every_keeps_its_phase_and_catches_up_once() -> None:
    assert next_fire(now=T0, every=60) == T0 + 60
    assert next_fire(now=T0 + 3601, every=60, previous=T0) == T0 + 3660
    assert next_fire(now=T0, every=60, previous=T0 + 30) == T0 + 30


@pytest.mark.fuzz
@given(st.lists(st.tuples(st.integers(0, 999), st.sampled_from(sorted(UNITS))), min_size=1))
def test_every_duration_adds_up(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    seconds = sum(n * UNITS[unit] for n, unit in parts)
    if 1 <= seconds <= MAX_EVERY:
        assert parse_every(text) == seconds
    else:
        with pytest.raises(TimeSpecError):
            parse_every(text)


@pytest.mark.fuzz
@given(st.text(max_size=40))
def test_any_text_is_a_duration_or_one_line(text: str) -> None:
    try:
        assert parse_every(text) >= 1
    except TimeSpecError as exc:
        assert str(exc).startswith("--every ") and "\n" not in str(exc)


CRON_FIELD = st.one_of(
    st.just("*"),
    st.integers(0, 70).map(str),
    st.tuples(st.integers(0, 70), st.integers(0, 70)).map(lambda r: f"{r[0]}-{r[1]}"),
    st.integers(0, 70).map(lambda n: f"*/{n}"),
    st.text(alphabet="0123456789*/-,LW#?abcxyz", min_size=1, max_size=6),
)


@pytest.mark.fuzz
@given(st.lists(CRON_FIELD, min_size=1, max_size=7), st.floats(0, 4e9))
def test_any_cron_is_a_schedule_or_one_line(fields: list[str], now: float) -> None:
    try:
        expr = check_cron(" ".join(fields))
    except TimeSpecError as exc:
        assert str(exc).startswith("--cron ") and "\n" not in str(exc)
        return
    assert len(expr.split()) == 5
    fire = next_fire(now=now, cron=expr)
    assert fire > now


@pytest.mark.fuzz
@given(st.integers(1, MAX_EVERY), st.floats(0, 4e9), st.floats(0, 4e9))
def test_every_fires_after_now_on_its_phase(every: int, previous: float, now: float) -> None:
    fire = next_fire(now=now, every=every, previous=previous)
    assert fire > now or fire == previous > now
    assert fire - every <= max(now, previous) + 1e-6  # no occurrence after now is skipped
    periods = (fire - previous) / every
    assert abs(periods - round(periods)) < 1e-6 * max(1.0, periods)
