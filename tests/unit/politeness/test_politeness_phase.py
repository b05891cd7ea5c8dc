"""The phase rule (``learning.phase``) the budget, ``crawlfleet status``, the dashboard and
``/metrics`` share, for the states a key passes through."""

from __future__ import annotations

import pytest

from crawlfleet.politeness import learning

NOW = 10_000_000.0
CODE = {name: code for code, name in learning.WHY.items()}


def fields(why: str, bad: float, learned_ago_s: float = 60.0) -> dict[str, float]:
    return {
        "rate": 10.0,
        "good": 9.0,
        "bad": bad,
        "why": CODE[why],
        "learned": NOW - learned_ago_s * 1000,
        "banned": NOW - 120_000,
        "tat": NOW,
        "cool": 0.0,
    }


@pytest.mark.parametrize(
    ("why", "bad", "phase"),
    [
        ("clean window", 0.0, "growing"),  # slow start
        ("clean window", 18.0, "growing"),  # back up under the ceiling after a halving
        ("hold", 18.0, "holding"),
        ("probe", 18.0, "probing"),
        ("hold", 0.0, "growing"),  # no ceiling known
    ],
)
def test_phase_of_a_key_not_backing_off(why: str, bad: float, phase: str) -> None:
    assert learning.phase(fields(why, bad), NOW) == phase


def test_a_ban_just_now_is_backing_off_whatever_the_ceiling() -> None:
    assert learning.phase(fields("ban", 18.0, learned_ago_s=1), NOW) == "backing off"
