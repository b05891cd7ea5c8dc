"""The soak's fault schedule: the same seed the same faults, every kind before any twice, spaced
as promised, never two at once, and a schedule that cannot be is one line."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from soak.schedule import JITTER, KINDS, plan

WORKERS, PROXIES, LIMITED = ("w1", "w2", "w3"), ("127.0.0.2", "127.0.0.3"), (4, 9)


def soak(seed: int = 1, **changes: object) -> list:  # type: ignore[type-arg]
    args: dict[str, object] = {
        "duration": 2700.0, "every": 240.0, "warmup": 120.0, "workers": WORKERS,
        "proxies": PROXIES, "limited_hosts": LIMITED, "seed": seed,
    } | changes  # fmt: skip
    return plan(**args)  # type: ignore[arg-type]


def test_a_45_minute_soak_meets_every_kind_once_and_the_same_seed_gives_the_same_faults() -> None:
    faults = soak(sentinel=True)
    assert faults == soak(sentinel=True) and faults != soak(seed=2, sentinel=True)
    assert 8 <= len(faults) <= 13
    assert sorted(f.kind for f in faults[: len(KINDS)]) == sorted(KINDS)
    assert "failover" not in {f.kind for f in soak()}  # only on three hubs


@given(st.integers(0, 2**32), st.floats(60, 600), st.booleans())
def test_faults_are_spaced_never_overlap_and_leave_time_to_recover(
    seed: int, every: float, sentinel: bool
) -> None:
    faults = soak(seed, every=every, duration=every * 12, warmup=60.0, sentinel=sentinel)
    assert faults and faults[0].at >= 60.0
    assert faults[-1].at <= every * 12 - every
    for one, next_ in itertools.pairwise(faults):
        assert next_.at - (one.at + one.hold) >= every * (1 - JITTER) - 0.1
    for fault in faults:
        assert fault.kind in KINDS and (sentinel or fault.kind != "failover")
        if fault.kind in ("kill-worker", "cut-worker"):
            assert fault.target in WORKERS
        elif fault.kind == "stop-proxy":
            assert fault.target in PROXIES
        elif fault.kind == "ban-storm":
            assert int(fault.target) in LIMITED
        else:
            assert fault.target == ""


def test_no_proxy_or_limited_host_means_no_fault_of_that_kind() -> None:
    kinds = {f.kind for f in soak(proxies=(), limited_hosts=(), duration=20000.0)}
    assert kinds == set(KINDS) - {"stop-proxy", "ban-storm", "failover"}
    # where a worker cannot be cut from the hub, no cut strikes
    uncut = {f.kind for f in soak(cut=False, sentinel=True, duration=20000.0)}
    assert uncut == set(KINDS) - {"cut-worker"}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"every": 0.0}, "the fault interval must be above 0 s, got 0.0"),
        ({"every": float("nan")}, "the fault interval must be above 0 s, got nan"),
        (
            {"duration": 300.0},
            "a soak of 300 s has no room for a fault after a 120 s warm-up and before its last "
            "240 s",
        ),
        ({"warmup": -1.0}, "a soak of 2700 s has no room for a fault after a -1 s warm-up"),
        ({"workers": ()}, "the soak needs at least one worker"),
    ],
)
def test_a_schedule_that_cannot_be_is_one_line(changes: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError) as raised:
        soak(**changes)
    assert str(raised.value).startswith(error) and "\n" not in str(raised.value)
