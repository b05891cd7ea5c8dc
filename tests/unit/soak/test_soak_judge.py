"""Judging a recorded soak reads what the soak left behind: a page missing from the access log,
an item exported twice, an ERROR line no fault explains and a fault struck after the crawl ended
are each found in the files, as the checkers name them (``make soak --judge`` runs this alone)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from soak.checkers import Samples, hub_memory
from soak.judge import ITEMS, judge
from soak.web import Web

STARTED = 1_800_000_000.0
HOSTS, PAGES, SEED = 3, 30, 7
CACHE = 100_000  # the workers' seen cache: full 100 s in


def _record(faults: list[dict[str, Any]], planned: int) -> dict[str, Any]:
    samples = [
        {"t": STARTED + t, "memory": 8 << 20, "items_memory": 1 << 20, "queue_memory": 1 << 20,
         "filter_memory": 2 << 20, "rss": {"w1:10": 90 << 20}, "served": 3, "refused": 0,
         "failed": 0, "queued": 5, "leased": 1, "distinct": 0,
         "seen_cache": {"w1:10": min(t * 1000, CACHE)}}
        for t in range(0, 400, 5)
    ]  # fmt: skip
    samples[-1].update(queued=0, leased=0)  # taken once the workers stopped, the crawl done
    return {
        "args": {"hosts": str(HOSTS), "pages": str(PAGES), "seed": str(SEED), "every": "240",
                 "warmup": "30"},
        "started": STARTED,
        "plan": [{}] * planned,
        "faults": faults,
        "samples": samples,
        "seen_cache_size": CACHE,
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


def test_each_warm_up_ends_when_what_grows_by_design_has_grown(tmp_path: Path) -> None:
    """A worker's RSS judged once its seen cache is full; the hub's memory once every site was
    found (each site's first page served): growth before either is not a leak."""
    _soak(tmp_path / "work")
    first: dict[str, float] = {}
    for line in (tmp_path / "work" / "access.log").read_text().splitlines():
        when, _, host, _, _ = line.split()
        first.setdefault(host, float(when))
    found = max(first.values()) - STARTED
    assert found > 60  # the last site is found well after the fixed warm-up
    record = _record([_fault(100, 110)], planned=1)
    for s in record["samples"]:
        t = s["t"] - STARTED
        s["rss"]["w1:10"] = (90 + 0.6 * min(t, 100)) * 2**20  # +67 % while its cache fills
        s["memory"] = (8 + 4 * min(t, found) / found) * 2**20  # state per site as sites appear
    verdicts = {v.name: v for v in judge(record, tmp_path / "work")[0]}
    assert verdicts["worker RSS"].ok, verdicts["worker RSS"]
    # (the budget is this tiny web's: the per-site state is judged for growth, not size here)
    assert "+0.0% after warm-up" in verdicts["hub memory"].summary, verdicts["hub memory"]
    assert not any("after warm-up" in line for line in verdicts["hub memory"].evidence)
    # judged from the fixed warm-up (a soak recorded before the cache was sampled), the worker
    # grows; the hub, judged before its last site was found, too
    del record["seen_cache_size"]
    assert not {v.name: v for v in judge(record, tmp_path / "work")[0]}["worker RSS"].ok
    memory = Samples.of((s["t"], s["memory"] - s["items_memory"]) for s in record["samples"])
    held = Samples.of((s["t"], 3 << 20) for s in record["samples"])
    early = hub_memory(memory, budget=64 << 20, warm_at=STARTED + 30, held=held)
    assert not early.ok and "after warm-up" in early.evidence[0]


def test_a_lost_page_the_bloom_filter_took_for_seen_is_excused(tmp_path: Path) -> None:
    """The Bloom filter's record (its layers, and the lost pages it answered yes for) beside
    the seen caches' samples: the lost page it explains is excused, and only that one."""
    _soak(tmp_path / "work", leave_out=2)
    web = Web.draw(HOSTS, PAGES, SEED)
    first, second = (web.logged(h, p) for h, p in sorted(web.reachable())[:2])
    record = _record([_fault(100, 110)], planned=1)
    # a small, full filter: a false positive or two among 30 fingerprints is expected
    record["bloom"] = {"layers": [[64, 2, 30]], "seen": [first, second]}
    verdicts = {v.name: v for v in judge(record, tmp_path / "work")[0]}
    assert verdicts["lost"].ok, verdicts["lost"]
    assert " 2 lost: 2 the Bloom filter took for seen" in verdicts["lost"].summary
    # the root page (linked from many) not taken for seen: lost, whatever the filter explains
    record["bloom"]["seen"] = [second]
    verdicts = {v.name: v for v in judge(record, tmp_path / "work")[0]}
    assert not verdicts["lost"].ok and verdicts["lost"].evidence == (first,)
