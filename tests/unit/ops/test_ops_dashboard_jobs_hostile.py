"""Hostile bodies for the dashboard's job and schedule forms: whatever JSON object arrives, the
form reading either gives the job the CLI would run or refuses with one line (never another
exception), and the CSRF token is bound to its session."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crawlfleet.dashboard.jobs import Refused, Sessions, job_spec
from crawlfleet.jobs.control import JobSpec

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(["project", "spider", "args", "settings", "workers", "overlap", "x"])


@pytest.mark.fuzz
@given(st.dictionaries(FIELDS, JSON | st.text(max_size=80), max_size=7))
@example({"project": "classic", "spider": "pages", "args": "a=1\n\nb = 2", "workers": "2"})
@example({"project": "p", "spider": "s", "settings": ["K=V", "=x"]})
@example({"project": "p", "spider": "s\n", "workers": "all"})
def test_a_form_is_a_job_or_one_line(body: dict[str, Any]) -> None:
    try:
        spec = job_spec(body)
    except Refused as exc:
        assert str(exc) and "\n" not in str(exc)
        assert exc.status == 400
        return
    assert isinstance(spec, JobSpec) and spec.project and spec.spider
    assert spec.workers is None or spec.workers >= 1
    assert all(name and "\n" not in name for name, _ in (*spec.args, *spec.settings))


def test_the_forms_read_as_the_cli_does() -> None:
    spec = job_spec(
        {"project": " classic ", "spider": "pages", "args": "depth=2\nsite=http://x/?a=b",
         "settings": "CONCURRENT_REQUESTS=8", "workers": "3", "fresh_dupefilter": True}
    )  # fmt: skip
    assert spec == JobSpec(
        "classic", "pages", [("depth", "2"), ("site", "http://x/?a=b")],
        [("CONCURRENT_REQUESTS", "8")], 3, False, True,
    )  # fmt: skip
    with pytest.raises(Refused, match="args line 2: -a takes NAME=VALUE, got 'oops'"):
        job_spec({"project": "p", "spider": "s", "args": "a=1\noops"})


def test_a_csrf_token_belongs_to_one_session() -> None:
    sessions = Sessions()
    alice, bob = sessions.create("alice"), sessions.create("bob")
    assert sessions.user(alice) == "alice" and sessions.user("forged") is None
    assert sessions.csrf(alice) != sessions.csrf(bob)
    assert Sessions().csrf(alice) != sessions.csrf(alice)  # another process, another key
    sessions.drop(alice)
    assert sessions.user(alice) is None and sessions.user(bob) == "bob"
