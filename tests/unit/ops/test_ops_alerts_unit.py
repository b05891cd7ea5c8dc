"""The alert rules' state and the /metrics families they need, without Redis: a stored state
that is not what the rules wrote never breaks an evaluation, the hub's gauges render, and only a
job agent down without a clean stop alerts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ops_sample_view import agent, view

from crawlfleet.alerts import rules
from crawlfleet.dashboard import metrics

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(["bans", "ban_events", "deadletter", "jobs", "memory"])


@pytest.mark.fuzz
@given(st.dictionaries(KEYS, JSON, max_size=5) | JSON)
def test_any_stored_state_reads_as_a_state_and_evaluates(data: Any) -> None:
    state = rules.AlertState.from_json(json.dumps(data))
    sample = view()
    sample["hub"] |= {"time": 100.0, "used_memory": 1, "maxmemory": 0, "jobs": [], "bans": {}}
    rules.evaluate(sample, state)
    assert rules.AlertState.from_json(state.to_json()) == state


def test_a_state_round_trips_and_junk_gives_a_fresh_one() -> None:
    state = rules.AlertState(
        bans={"book": {"w": 3.0}},
        ban_events={"book": [[1.0, 2.0]]},
        deadletter={"book": [4.0, 1.0, 2.0]},
        jobs={"7": [10.0, 5.0]},
        memory=9.0,
    )
    assert rules.AlertState.from_json(state.to_json()) == state
    for junk in (None, b"", "{nope", "[1, 2]", '{"jobs": {"1": [1]}}', '{"memory": "x"}'):
        assert rules.AlertState.from_json(junk) == rules.AlertState()


def test_the_hub_gauges_and_the_lost_worker_render() -> None:
    sample = view()
    sample["hub"] |= {
        "time": 100.0,
        "used_memory": 900,
        "maxmemory": 1000,
        "jobs": [
            {
                "id": "7",
                "project": "p",
                "spider": "book",
                "state": "running",
                "started": 50.0,
                "pages": 12,
            },
            {
                "id": "8",
                "project": "p",
                "spider": "other",
                "state": "paused",
                "started": None,
                "pages": 0,
            },
        ],
        "bans": {},
    }
    text = metrics.render(sample).decode()
    assert "crawlfleet_redis_used_memory_bytes 900.0" in text
    assert "crawlfleet_redis_maxmemory_bytes 1000.0" in text
    assert 'crawlfleet_job_running{job_id="7",project="p",spider="book"} 1.0' in text
    assert 'crawlfleet_job_running{job_id="8",project="p",spider="other"} 0.0' in text
    assert 'crawlfleet_job_pages{job_id="7",project="p",spider="book"} 12.0' in text
    assert (
        'crawlfleet_job_started_timestamp_seconds{job_id="7",project="p",spider="book"} 50.0'
        in text
    )
    assert 'job_id="8",project="p",spider="other"} 0.0' in text
    # The sample's second worker stopped cleanly: no worker is lost.
    assert 'crawlfleet_worker_lost{host="b",spider="book",worker="c:2:bb"} 0.0' in text
    sample["hub"]["used_memory"] = None  # INFO refused
    assert "\ncrawlfleet_redis_used_memory_bytes " not in metrics.render(sample).decode()
    assert rules.evaluate(sample, rules.AlertState()) == []


def test_only_an_agent_down_without_a_clean_stop_alerts_and_its_gauges_render() -> None:
    sample = view()  # agent b alive, agent c stopped cleanly
    sample["hub"]["agents"].append(agent("d", alive=False))  # its deadline (90 s) passed
    (down,) = rules.evaluate(sample, rules.AlertState())
    assert down.key == "CrawlfleetAgentDown{agent=d,host=host-d}"
    assert down.severity == "warning" and down.since == 90.0 and down.value == 20.0
    assert down.summary == (
        "job agent d on host-d is down since 1970-01-01 00:01:30 UTC: no job can start there"
    )
    # A reader whose clock lags Redis's never dates it in the future.
    assert rules.evaluate(sample, rules.AlertState(), now=80.0)[0].since == 80.0
    text = metrics.render(sample).decode()
    for name, up, lost in (("b", 1.0, 0.0), ("c", 0.0, 0.0), ("d", 0.0, 1.0)):
        assert f'crawlfleet_agent_up{{agent="{name}",host="host-{name}"}} {up}' in text
        assert f'crawlfleet_agent_lost{{agent="{name}",host="host-{name}"}} {lost}' in text
    assert 'crawlfleet_agent_deadline_timestamp_seconds{agent="d",host="host-d"} 90.0' in text
    assert 'crawlfleet_agent_deadline_timestamp_seconds{agent="c"' not in text
    sample["hub"]["agents"][-1]["stopped"] = True  # the same agent stopped cleanly
    assert rules.evaluate(sample, rules.AlertState()) == []
