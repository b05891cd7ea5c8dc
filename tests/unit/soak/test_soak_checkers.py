"""The soak's checkers catch what they are for: each shown failing on a planted fault and passing
on a clean record, the set-valued ones over inputs Hypothesis generates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from soak.checkers import (
    EVIDENCE,
    Fault,
    LogLine,
    Samples,
    exported_once,
    fetched_again,
    hub_memory,
    lost_pages,
    recovery,
    unexplained_errors,
    worker_rss,
)

MIB = 2**20
pages = st.sets(st.text("abcdef/", min_size=1, max_size=6), max_size=30)


@given(pages, pages)
def test_lost_pages_fails_exactly_when_a_reachable_page_was_not_fetched(
    reachable: set[str], fetched: set[str]
) -> None:
    verdict = lost_pages(reachable, fetched)
    assert verdict.ok == (bool(reachable) and reachable <= fetched)
    lost = reachable - fetched
    assert f"{len(lost)} lost" in verdict.summary
    assert set(verdict.evidence) <= lost and len(verdict.evidence) == min(len(lost), EVIDENCE)


def test_lost_pages_with_nothing_reachable_is_a_failure_not_a_pass() -> None:
    assert not lost_pages([], ["/a"]).ok


def test_fetched_again_is_bounded_by_what_was_in_flight_at_the_faults() -> None:
    kill = Fault("sigkill b", 100.0, 100.0, in_flight=2)
    clean = ["/a", "/b", "/c"]
    assert fetched_again(clean, []).ok
    assert fetched_again([*clean, "/a", "/b"], [kill]).ok
    planted = fetched_again([*clean, "/a", "/b", "/a"], [kill])
    assert not planted.ok
    assert planted.summary.startswith("3 fetch(es) of a page already fetched, bound 2")
    assert planted.evidence[0] == "/a x3"


@given(st.lists(st.sampled_from("abcdefgh"), max_size=20), st.sets(st.sampled_from("abcdefgh")))
def test_exported_once_fails_on_a_duplicate_a_missing_or_a_stray_item(
    exported: list[str], expected: set[str]
) -> None:
    verdict = exported_once(exported, expected)
    assert verdict.ok == (sorted(exported) == sorted(expected))


def test_exported_once_names_what_is_wrong() -> None:
    verdict = exported_once(["1", "2", "2", "9"], ["1", "2", "3"])
    assert verdict.summary == (
        "3 distinct of 3 expected: 1 missing, 1 more than once, 1 not expected"
    )
    assert verdict.evidence == ("missing 3", "twice 2", "not expected 9")


def test_hub_memory_catches_a_breach_of_the_budget_and_growth_once_sized() -> None:
    sized = [(0, 10 * MIB), (60, 50 * MIB), (120, 51 * MIB), (180, 52 * MIB)]
    assert hub_memory(Samples.of(sized), budget=64 * MIB, sized_at=60).ok
    over = hub_memory(Samples.of([*sized, (240, 70 * MIB)]), budget=64 * MIB, sized_at=60)
    assert not over.ok
    assert over.evidence[0].startswith("70.0 MiB at 240 > budget 64.0")
    leaking = [(60, 50 * MIB), (120, 53 * MIB), (180, 56 * MIB)]  # +12 % once sized
    grows = hub_memory(Samples.of(leaking), budget=64 * MIB, sized_at=60)
    assert not grows.ok and "grew 12.0% after the Bloom filter was sized" in grows.evidence[0]
    assert not hub_memory(Samples(), budget=64 * MIB, sized_at=0).ok
    assert not hub_memory(Samples.of([(0, MIB)]), budget=64 * MIB, sized_at=60).ok


def test_worker_rss_judges_each_process_after_its_own_warm_up() -> None:
    steady = Samples.of([(0, 50 * MIB), (60, 100 * MIB), (120, 104 * MIB), (180, 105 * MIB)])
    restarted = Samples.of([(200, 30 * MIB), (230, 90 * MIB)])  # killed before its warm-up ended
    verdict = worker_rss({"b:1": steady, "b:2": restarted}, warmup=60)
    assert verdict.ok, verdict
    assert verdict.summary == (
        "1 process(es) judged, 0 grew more than 10%, 1 did not outlive the warm-up"
    )
    leaking = Samples.of([(0, 50 * MIB), (60, 100 * MIB), (120, 108 * MIB), (180, 115 * MIB)])
    planted = worker_rss({"b:1": steady, "c:1": leaking}, warmup=60)
    assert not planted.ok and planted.evidence == ("c:1 grew 15.0% after warm-up (limit 10%)",)
    assert not worker_rss({"b:1": restarted}, warmup=60).ok  # nothing judged: not a pass


def _rate(level: float, dip: tuple[float, float], back: float) -> Samples:
    """A crawl at ``level`` pages/s sampled every 5 s from 0 to 600, at 0 during ``dip``, then at
    ``back`` x level."""
    start, end = dip
    return Samples.of(
        (t, 0.0 if start <= t < end else (level * back if t >= end else level))
        for t in range(0, 600, 5)
    )


def test_recovery_times_each_fault_and_fails_one_the_crawl_never_recovers_from() -> None:
    stop = Fault("proxy stopped", 200.0, 260.0)
    verdict, times = recovery(_rate(40.0, (200, 260), back=1.0), [stop])
    assert verdict.ok and times == {"proxy stopped": 60.0}
    slow, times = recovery(_rate(40.0, (200, 260), back=0.8), [stop])
    assert not slow.ok and times == {"proxy stopped": None}
    assert slow.evidence == ("proxy stopped at 200: not back to 90% of 40.0/s within 600 s",)


def test_recovery_does_not_judge_a_fault_with_no_rate_before_it_or_none_after() -> None:
    verdict, times = recovery(_rate(40.0, (0, 300), back=1.0), [Fault("early", 100.0, 100.0)])
    assert verdict.ok and times == {}
    ended = Samples.of((t, 40.0) for t in range(0, 300, 5))  # the crawl's last sample at 295
    verdict, times = recovery(ended, [Fault("late", 280.0, 280.0)])
    assert verdict.ok and times == {}


@given(st.floats(1.0, 500.0), st.floats(0.0, 1.5))
def test_recovery_passes_exactly_when_the_rate_comes_back_to_nine_tenths(
    level: float, back: float
) -> None:
    verdict, _ = recovery(_rate(level, (200, 260), back=back), [Fault("f", 200.0, 260.0)])
    assert verdict.ok == (level * back >= 0.9 * level)


def test_every_error_line_must_be_explained_by_a_fault_in_its_time() -> None:
    kill = Fault("sigkill hub", 100.0, 110.0, explains=(r"Connection refused",), grace=30.0)
    lines = [
        LogLine(105.0, "b", "ERROR", "Error 111 connecting: Connection refused."),
        LogLine(139.0, "c", "error", "Connection refused"),
        LogLine(150.0, "c", "INFO", "Connection refused"),  # not an error line
    ]
    assert unexplained_errors(lines, [kill]).ok
    late = LogLine(141.0, "b", "ERROR", "Connection refused")  # past the grace
    other = LogLine(105.0, "b", "ERROR", "KeyError: 'url'")  # in time, not what the fault causes
    planted = unexplained_errors([*lines, late, other], [kill])
    assert not planted.ok
    assert planted.summary == "4 ERROR line(s), 2 explained by a fault, 2 not"
    assert planted.evidence == ("b at 141: Connection refused", "b at 105: KeyError: 'url'")


def test_a_fault_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError, match=r"fault x: ends at 1\.0 before it starts"):
        Fault("x", 2.0, 1.0)
