"""Judging a recorded soak reads what the soak left behind: a page missing from the access log,
an item exported twice, an ERROR line no fault explains and a fault struck after the crawl ended
are each found in the files, as the checkers name them (``make soak --judge`` runs this alone)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from soak.judge import ITEMS, judge
from soak.web import Web

STARTED = 1_800_000_000.0
HOSTS, PAGES, SEED = 3, 30, 7


def _record(faults: list[dict[str, Any]], planned: int) -> dict[str, Any]:
    samples = [
        {"t": STARTED + t, "memory": 8 << 20, "items_memory": 1 << 20, "queue_memory": 1 << 20,
         "filter_memory": 2 << 20, "rss": {"w1:10": 90 << 20}, "served": 3, "refused": 0,
         "failed": 0, "queued": 5, "leased": 1, "distinct": 0}
        for t in range(0, 400, 5)
    ]  # fmt: skip
    return {
        "args": {"hosts": str(HOSTS), "pages": str(PAGES), "seed": str(SEED), "every": "240",
                 "warmup": "30"},
        "started": STARTED,
        "plan": [{}] * planned,
        "faults": faults,
        "samples": samples,
    }  # fmt: skip


def _soak(work: Path, leave_out: int = 0, twice: int = 0, error: str = "") -> None:
    web = Web.draw(HOSTS, PAGES, SEED)
    reachable = sorted(web.reachable())
    lines, items = [], []
    for n, (h, p) in enumerate(reachable[leave_out:]):
        when = STARTED + 10 + n * 10  # one page every 10 s, the last near 300 s
        lines.append(f"{when:.3f} 127.0.0.2 {web.hosts[h].address} /p/{p} 200")
        items.append(json.dumps({"id": f"{h}/{p}"}))
    items += items[:twice]
    work.mkdir()
    (work / "access.log").write_text("\n".join(lines) + "\n")
    (work / ITEMS).write_text("\n".join(items) + "\n")
    (work / "w1.log").write_text(
        "2027-01-15 08:00:00 [scrapy.core.engine] INFO: Spider opened\n"
        + (f"2027-01-15 08:00:05 [soak] ERROR: {error}\n" if error else "")
    )


def _verdicts(tmp_path: Path, faults: list[dict[str, Any]], planned: int = 1, **soak: Any):
    _soak(tmp_path / "work", **soak)
    verdicts, recovery, counts = judge(_record(faults, planned), tmp_path / "work")
    return {v.name: v for v in verdicts}, recovery, counts


def _fault(start: float, end: float) -> dict[str, Any]:
    return {"name": "stop-proxy 127.0.0.2", "start": STARTED + start, "end": STARTED + end,
            "in_flight": 0, "explains": [], "grace": 60.0}  # fmt: skip


def test_a_clean_recorded_soak_passes_every_checker(tmp_path: Path) -> None:
    verdicts, recovery, counts = _verdicts(tmp_path, [_fault(100, 110)])
    assert {n: v.ok for n, v in verdicts.items() if not v.ok} == {}
    assert counts["pages"] == counts["distinct"] == counts["fetched"] == PAGES
    assert recovery == {f"stop-proxy 127.0.0.2 at {STARTED + 100:.0f}": 10.0}


def test_a_recorded_soak_is_failed_for_what_its_files_show(tmp_path: Path) -> None:
    verdicts, _, counts = _verdicts(
        tmp_path, [_fault(100, 110), _fault(390, 395)], planned=3, leave_out=1, twice=1,
        error="Spider error processing <GET http://127.77.0.1/p/3>",
    )  # fmt: skip
    failed = {n for n, v in verdicts.items() if not v.ok}
    assert failed == {"lost", "exported once", "schedule", "errors explained"}
    assert verdicts["lost"].summary.startswith(
        f"{PAGES - 1} of {PAGES} reachable pages fetched, 1 lost: 0 the Bloom filter took for seen"
    )
    # an item for each page fetched: the page never fetched is the lost-pages checker's
    assert verdicts["exported once"].summary == (
        f"{PAGES - 1} distinct of {PAGES - 1} expected: 0 missing, 1 more than once, 0 not expected"
    )
    assert verdicts["schedule"].summary == (
        "2 of 3 planned fault(s) injected, 1 after the crawl ended"
    )
    assert verdicts["errors explained"].evidence[0].startswith("w1 at ")
    assert counts["distinct"] == PAGES - 1
