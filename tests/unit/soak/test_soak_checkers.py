"""The soak's checkers catch what they are for: each shown failing on a planted fault and passing
on a clean record, the set-valued ones over inputs Hypothesis generates."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from soak.checkers import (
    EVIDENCE,
    Fault,
    LogLine,
    Samples,
    bloom_false_positives,
    exported_once,
    fetched_again,
    filled,
    hub_memory,
    lost_pages,
    poisson_upper,
    recovery,
    schedule_played,
    sites_found,
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


def test_lost_pages_are_excused_only_as_the_bloom_filters_expected_false_positives() -> None:
    reachable = [f"/{i}" for i in range(100)]
    fetched = reachable[10:]
    # 4 taken for seen where 1.5 are expected (at most 6), 6 more linked only from those
    excused = lost_pages(reachable, fetched, reachable[:4], reachable[4:10], false_positives=1.5)
    assert excused.ok, excused
    assert excused.summary == (
        "90 of 100 reachable pages fetched, 10 lost: 4 the Bloom filter took for seen (expected "
        "1.5, at most 6), 6 linked only from lost pages, 0 otherwise"
    )
    # the same count of pages taken for seen where the filter explains far fewer: a lost queue
    too_many = lost_pages(reachable, fetched, reachable[:4], reachable[4:10], false_positives=0.1)
    assert not too_many.ok
    assert too_many.evidence == ("4 taken for seen, more than the 2 the filter explains",)
    # a page neither taken for seen nor orphaned is lost, whatever the filter explains
    other = lost_pages(reachable, fetched, reachable[:4], reachable[4:9], false_positives=1.5)
    assert not other.ok and other.evidence == ("/9",)


def test_pages_still_queued_when_a_crawl_did_not_finish_are_waiting_not_lost() -> None:
    reachable = [f"/{i}" for i in range(100)]
    fetched = reachable[30:]
    # 20 found and still queued when the soak stopped, 10 linked only from them
    waiting = lost_pages(reachable, fetched, reachable[:20], reachable[20:30], 0.5, queued=20)
    assert waiting.ok, waiting
    assert waiting.summary == (
        "70 of 100 reachable pages fetched, 30 not fetched: 20 still queued when the soak "
        "stopped (the crawl did not finish), 0 the Bloom filter took for seen (expected 0.5, at "
        "most 4), 10 linked only from lost pages, 0 otherwise"
    )
    # a queue holding fewer than the pages it owes dropped some: those are lost
    dropped = lost_pages(reachable, fetched, reachable[:20], reachable[20:30], 0.5, queued=12)
    assert not dropped.ok
    assert dropped.evidence == ("8 taken for seen, more than the 4 the filter explains",)
    # queued requests excuse only pages the filter answers yes for, never one it does not
    other = lost_pages(reachable, fetched, reachable[:19], reachable[20:30], 0.5, queued=50)
    assert not other.ok and other.evidence == ("/19",)


def test_the_expected_false_positives_are_what_a_bloom_filter_makes() -> None:
    # A real filter of m bits and k hashes: count the fresh items it takes for seen as it
    # fills, over many runs, against the expectation the lost-pages checker is given.
    m, k, n, runs = 4096, 4, 1200, 60
    made = 0
    for run in range(runs):
        bits = bytearray(m)
        for i in range(n):
            digest = hashlib.sha256(f"{run}/{i}".encode()).digest()
            spots = [int.from_bytes(digest[4 * j : 4 * j + 4], "big") % m for j in range(k)]
            made += all(bits[s] for s in spots)
            for s in spots:
                bits[s] = 1
    expected = bloom_false_positives([(m, k, n)], step=10)
    assert abs(made / runs - expected) < 0.1 * expected, (made / runs, expected)
    # a scalable filter's second layer adds to what its full first one answers
    assert bloom_false_positives([(m, k, n), (4 * m, k, 0)], 10) == pytest.approx(expected)
    assert bloom_false_positives([(m, k, n), (4 * m, k, n)], 10) > 2 * expected
    assert poisson_upper(0.0) == 0 and poisson_upper(54.7) == 79 and poisson_upper(1e5) > 1e5


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


def test_hub_memory_catches_a_breach_of_the_budget_and_growth_once_warm() -> None:
    sized = [(0, 10 * MIB), (60, 50 * MIB), (120, 51 * MIB), (180, 52 * MIB)]
    assert hub_memory(Samples.of(sized), budget=64 * MIB, warm_at=60).ok
    over = hub_memory(Samples.of([*sized, (240, 70 * MIB)]), budget=64 * MIB, warm_at=60)
    assert not over.ok
    assert over.evidence[0].startswith("70.0 MiB at 240 > budget 64.0")
    leaking = [(60, 50 * MIB), (120, 53 * MIB), (180, 56 * MIB)]  # +12 % once sized
    grows = hub_memory(Samples.of(leaking), budget=64 * MIB, warm_at=60)
    assert not grows.ok and "grew 12.0% after warm-up" in grows.evidence[0]
    # Growth that is the queue holding more work is not a leak; the same growth elsewhere is.
    queue = Samples.of([(60, 10 * MIB), (120, 13 * MIB), (180, 16 * MIB)])
    assert hub_memory(Samples.of(leaking), budget=64 * MIB, warm_at=60, held=queue).ok
    rest = hub_memory(Samples.of(leaking), budget=64 * MIB, warm_at=60, held=Samples.of(
        [(60, 10 * MIB), (120, 10 * MIB), (180, 10 * MIB)]))  # fmt: skip
    assert not rest.ok and rest.evidence[0].endswith("(limit 10%) (less the queue and the filter)")
    assert not hub_memory(Samples(), budget=64 * MIB, warm_at=0).ok
    assert not hub_memory(Samples.of([(0, MIB)]), budget=64 * MIB, warm_at=60).ok


def test_hub_memory_judges_the_rest_measured_directly_by_its_quarters() -> None:
    """Measured directly (other keys and buffers), the rest is judged flat by the medians of its
    first and last quarters after warm-up: a buffer that comes and goes passes, a climb fails,
    and the budget is still the whole memory's."""
    whole = Samples.of((t, 100 * MIB) for t in range(0, 400, 5))
    spiky = Samples.of((t, (5 + 2 * (t % 50 == 0)) * MIB) for t in range(0, 400, 5))
    verdict = hub_memory(whole, budget=128 * MIB, warm_at=60, rest=spiky)
    assert verdict.ok, verdict
    assert verdict.summary.endswith("+0.0% after warm-up (the rest: other keys, buffers)")
    climbing = Samples.of((t, (5 + t / 200) * MIB) for t in range(0, 400, 5))  # +33 % by the end
    leak = hub_memory(whole, budget=128 * MIB, warm_at=60, rest=climbing)
    assert not leak.ok and leak.evidence[0].startswith("grew ")
    assert not hub_memory(whole, budget=64 * MIB, warm_at=60, rest=spiky).ok  # over its budget
    # by subtraction it is still judged from its first sample to its largest: a remainder that
    # rises and then drifts below zero (the second full soak's) is not called flat
    drifting = Samples.of([(60, 4.6 * MIB), (300, 5.4 * MIB), (900, 1 * MIB), (1800, -3 * MIB)])
    assert not hub_memory(drifting, budget=128 * MIB, warm_at=60).ok


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


def test_worker_rss_waits_for_each_process_s_seen_cache_to_fill() -> None:
    # Its cache of seen fingerprints fills until 300 s: growth until then is bounded, not a leak.
    filling = Samples.of([(0, 50 * MIB), (60, 80 * MIB), (300, 120 * MIB), (600, 124 * MIB)])
    full = filled({"b:1": Samples.of([(60, 40_000), (300, 100_000), (600, 100_000)])}, 100_000)
    assert full == {"b:1": 300}
    assert not worker_rss({"b:1": filling}, warmup=60).ok  # judged from 60 s: +55 %
    verdict = worker_rss({"b:1": filling}, warmup=60, full=full)
    assert verdict.ok and verdict.summary.startswith("1 process(es) judged, 0 grew")
    # the same process still growing once its cache is full is caught
    leaking = Samples.of([*filling.points, (900, 140 * MIB)])
    caught = worker_rss({"b:1": leaking}, warmup=60, full=full)
    assert not caught.ok and caught.evidence == ("b:1 grew 16.7% after warm-up (limit 10%)",)
    # a process whose cache never filled is counted, not judged
    never = worker_rss({"b:1": filling, "c:1": leaking}, warmup=60, full=full)
    assert never.summary.endswith("1 did not outlive the warm-up (its seen cache full)")


def test_sites_found_is_when_the_last_host_was_first_served() -> None:
    served = [(5.0, "a"), (7.0, "b"), (9.0, "a"), (40.0, "c"), (41.0, "b"), (3.0, "a")]
    assert sites_found(served) == 40.0
    assert sites_found([]) == 0.0


def _served(
    level: float, dip: tuple[float, float], back: float, hosts: int = 4, until: int = 600
) -> list[tuple[float, str]]:
    """A crawl serving ``level`` pages/s spread over ``hosts`` hosts from 0 to ``until``, none
    during ``dip``, then ``back`` x level."""
    start, end = dip
    served: list[tuple[float, str]] = []
    for second in range(until):
        if start <= second < end:
            continue
        n = round(level * (back if second >= end else 1.0))
        for i in range(n):  # the hosts in turn, so each is served before and after the fault
            served.append((second + i / n, f"h{len(served) % hosts}"))
    return served


def test_recovery_times_each_fault_and_fails_one_the_crawl_never_recovers_from() -> None:
    stop = Fault("proxy stopped", 200.0, 260.0)
    verdict, times = recovery(_served(40.0, (200, 260), back=1.0), [stop])
    assert verdict.ok and times == {"proxy stopped at 200": 60.0}
    slow, times = recovery(_served(40.0, (200, 260), back=0.8), [stop])
    assert not slow.ok and times == {"proxy stopped at 200": None}
    assert slow.evidence == (
        "proxy stopped at 200: not back to 90% of 40.0/s, nor its open hosts to theirs, "
        "within 600 s",
    )


def test_recovery_names_each_strike_of_a_kind_apart() -> None:
    served = _served(40.0, (0, 0), back=1.0)
    twice = [Fault("kill-worker w1", 100.0, 100.0), Fault("kill-worker w1", 300.0, 300.0)]
    verdict, times = recovery(served, twice)
    assert verdict.ok and times == {"kill-worker w1 at 100": 0.0, "kill-worker w1 at 300": 0.0}


def test_recovery_judges_a_tail_by_the_rate_its_remaining_hosts_allow() -> None:
    # Before the fault four hosts at 10/s each; three run out of pages during it, and the fourth
    # (a rate-limited site) goes on at its own 10/s: the crawl can never again reach 40/s.
    fault = Fault("freeze-hub", 200.0, 210.0)
    before = [(s + i / 40, f"h{i % 4}") for s in range(0, 200) for i in range(40)]
    tail = [(s + i / 10, "h0") for s in range(210, 600) for i in range(10)]
    verdict, times = recovery(before + tail, [fault])
    assert verdict.ok and times == {"freeze-hub at 200": 10.0}, verdict
    # The same tail host at half its pace after the fault: not a recovery.
    slow_tail = [(s + i / 5, "h0") for s in range(210, 600) for i in range(5)]
    planted, times = recovery(before + slow_tail, [fault])
    assert not planted.ok and times == {"freeze-hub at 200": None}


def test_recovery_does_not_judge_a_fault_with_no_rate_before_it_or_none_after() -> None:
    verdict, times = recovery(
        _served(40.0, (0, 300), back=1.0), [Fault("early", 100.0, 100.0), Fault("f", 400.0, 400.0)]
    )
    assert verdict.ok and times == {"f at 400": 0.0}
    ended = _served(40.0, (0, 0), back=1.0, until=300)  # the crawl's last page at 299.975
    verdict, times = recovery(ended, [Fault("late", 280.0, 280.0)])
    assert not verdict.ok and times == {}  # nothing judged: no recovery shown, not a pass
    assert verdict.summary.endswith("(the crawl ended before any could be judged)")
    assert recovery(ended, [])[0].ok  # no fault: nothing to recover from


@given(st.integers(4, 60), st.floats(0.0, 1.5))
def test_recovery_passes_exactly_when_the_rate_comes_back_to_nine_tenths(
    level: int, back: float
) -> None:
    served = _served(level, (200, 260), back=back)
    verdict, _ = recovery(served, [Fault("f", 200.0, 260.0)])
    assert verdict.ok == (round(level * back) >= 0.9 * level)


def test_the_schedule_fails_a_fault_not_injected_or_struck_after_the_crawl_ended() -> None:
    faults = [Fault("kill-worker w1", 100.0, 100.0), Fault("ban-storm 7", 300.0, 360.0)]
    assert schedule_played(2, faults, crawl_end=500.0).ok
    skipped = schedule_played(3, faults, crawl_end=500.0)
    assert not skipped.ok and skipped.summary.startswith("2 of 3 planned fault(s) injected")
    late = schedule_played(2, faults, crawl_end=200.0)
    assert not late.ok and late.evidence == ("ban-storm 7 at 300: the crawl ended at 200",)


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
