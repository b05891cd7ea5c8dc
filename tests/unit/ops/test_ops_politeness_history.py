"""The read model's rate history (``politeness.history``): each charted key's rate changes over
the last hour from the namespace's history list, whatever else the list holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crawlfleet.views.politeness import HISTORY_SECONDS, rate_history

PREFIX = "book:politeness:key:"
NOW = 10_000_000.0


def row(key: str) -> dict[str, str]:
    return {"key": key}


def test_changes_per_key_oldest_first_within_the_hour() -> None:
    entries = [
        f"{NOW - HISTORY_SECONDS * 1000 - 1:.0f} 1 0 {PREFIX}a@p1",  # older than the hour
        f"{NOW - 6000:.0f} 1 0 {PREFIX}a@p1",
        f"{NOW - 4000:.0f} 2 1 {PREFIX}a@p1",
        f"{NOW - 3000:.0f} 16 2 {PREFIX}b@p2",
        f"{NOW - 2000:.0f} 8 2 {PREFIX}a@p1".encode(),  # bytes, as redis-py returns them
        f"{NOW - 1000:.0f} 9 1 {PREFIX}c@p3",  # a key not charted
        "garbage",
        f"{NOW:.0f} nan 1 {PREFIX}a@p1",
        f"{NOW:.0f} 3 x {PREFIX}a@p1",
        f"{NOW:.0f} 3 1 other:politeness:key:a@p1",
    ]
    found = rate_history(entries, PREFIX, [row("a@p1"), row("b@p2")], NOW)
    assert found == {
        "a@p1": [
            [(NOW - 6000) / 1000, 1.0, "start"],
            [(NOW - 4000) / 1000, 2.0, "clean window"],
            [(NOW - 2000) / 1000, 8.0, "ban"],
        ],
        "b@p2": [[(NOW - 3000) / 1000, 16.0, "ban"]],
    }
    # nothing read (an error in the pipeline) is no history, not a failure
    assert rate_history(ValueError("WRONGTYPE"), PREFIX, [row("a@p1")], NOW) == {"a@p1": []}


@given(st.lists(st.one_of(st.text(max_size=60), st.binary(max_size=60)), max_size=20))
def test_hostile_entries_are_skipped(entries: list[str | bytes]) -> None:
    found = rate_history(entries, PREFIX, [row("a@p1")], NOW)
    assert set(found) == {"a@p1"}
    for at, rate, why in found["a@p1"]:
        assert isinstance(at, float) and isinstance(rate, float) and isinstance(why, str)
