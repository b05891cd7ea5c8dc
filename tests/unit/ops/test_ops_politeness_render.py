"""The politeness part of the renderers: the status table's limit line, keys and warnings, and
the bounded per-key series of /metrics."""

from __future__ import annotations

from ops_sample_view import key, view
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from crawlfleet.commands.status import STATUS_KEYS, render
from crawlfleet.dashboard import metrics


def _text(renderable: object) -> str:
    console = Console(record=True, width=160)
    console.print(renderable)
    return console.export_text()


def _families(body: bytes) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def test_status_shows_the_limit_the_keys_and_one_line_per_warning() -> None:
    text = _text(render(view()))
    assert (
        "limit         site — 12 of 12 active keys held (11 full, 1 cooling): add proxies" in text
    )
    lines = text.splitlines()
    (cooling,) = [line for line in lines if "10.0.0.99:3128" in line]
    assert cooling.split() == ["books.test", "10.0.0.99:3128", "cooling", "cooling", "down",
                               "10.00", "-", "9.50", "20.00", "-", "12.5s", "2"]  # fmt: skip
    assert sum(1 for line in lines if line.startswith("books.test")) == STATUS_KEYS
    assert "… 2 more (--json)" in text
    warnings = [line for line in lines if line.startswith("warning:")]
    assert warnings == [
        "warning: politeness key 'x': field 'rate' = 'zzz' is not a number; key skipped"
    ]
    assert "hub: PING 0.4 ms, CPU 25% of a core" in text


def test_status_of_a_crawl_without_politeness_keys() -> None:
    v = view()
    pol = v["spiders"][0]["politeness"]
    pol.update(bound="none", reason="idle: no request waits", keys=[], warnings=[])
    v["hub"]["cpu"] = None
    text = _text(render(v))
    assert "none — idle: no request waits" in text and "budget/s" not in text
    assert "hub: PING 0.4 ms\n" in text


def test_metrics_have_the_verdict_and_at_most_metric_keys_keys() -> None:
    v = view()
    pol = v["spiders"][0]["politeness"]
    pol["keys"] = [key(f"h{i}.test", "slack") for i in range(metrics.METRIC_KEYS + 10)]
    pol["keys"][0]["cap"] = 0.5
    pol["bound"] = "workers"
    families = _families(metrics.render(v))
    bound = {s.labels["bound"]: s.value for s in families["crawlfleet_politeness_bound"]}
    assert bound == {"none": 0.0, "workers": 1.0, "site": 0.0, "hub": 0.0}
    budgets = families["crawlfleet_politeness_budget"]
    assert len(budgets) == metrics.METRIC_KEYS
    assert budgets[0].labels == {"spider": "book", "site": "h0.test", "proxy": ""}
    assert [s.value for s in families["crawlfleet_politeness_cap"]] == [0.5]  # null: no series
    assert {s.value for s in families["crawlfleet_politeness_held"]} == {0.0}
    assert families["crawlfleet_hub_rtt_seconds"][0].value == 0.0004
    assert families["crawlfleet_hub_cpu_ratio"][0].value == 0.25
