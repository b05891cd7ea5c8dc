"""Judging a soak (issue 37): the checkers (``checkers.py``) applied to what a soak recorded —
``soak.json`` (its arguments, faults and samples) and its work directory (the synthetic web's
access log, the items `crawlfleet export` wrote, the workers' and services' logs) — then
``soak.json`` completed with the verdicts and the report written. ``make soak`` ends here, and
``scripts/soak.sh --judge --out DIR`` runs only this on a soak recorded before (after a checker
changed)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from soak import checkers, report
from soak.web import Web

ITEMS = "items.jsonl"  # what crawlfleet export writes into the work directory
SCRAPY_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \[([^\]]+)\] ([A-Z]+): (.*)$")
SERVICE_LINE = re.compile(r"^ts=(\S+) level=(\w+) (.*)$")


def access_lines(data: bytes) -> Iterator[tuple[float, str, str, int]]:
    """The synthetic web's access-log lines in ``data``: (time, host, path, status) each."""
    for line in data.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[4].isdigit():
            yield float(parts[0]), parts[2], parts[3], int(parts[4])


def conclude(record: dict[str, Any], out: Path) -> int:
    """Judge a soak's ``record`` with what it left in ``out/work``, write ``soak.json`` and the
    report, print the verdicts; 0 if every checker passed, else 1. ``--judge`` runs only this."""
    # the record first: a checker that fails to run leaves a soak --judge can judge again
    (out / "soak.json").write_text(json.dumps(record, indent=1, default=list))
    verdicts, recovery, counts = judge(record, out / "work")
    record.update(counts, recovery=recovery, verdicts=[vars(v) for v in verdicts])
    (out / "soak.json").write_text(json.dumps(record, indent=1, default=list))
    report.write(record, out)
    for verdict in verdicts:
        print(verdict.line(), flush=True)
        for line in verdict.evidence:
            print(f"    {line}", flush=True)
    return 0 if all(v.ok for v in verdicts) else 1


def judge(
    record: dict[str, Any], work: Path
) -> tuple[list[checkers.Verdict], dict[str, float | None], dict[str, int]]:
    """The checkers' verdicts on a soak: its record (arguments, faults, samples) and the files in
    ``work`` (the web's access log, the exported items, the logs)."""
    args = record["args"]
    web = Web.draw(
        int(args["hosts"]), int(args["pages"]), int(args["seed"]), args.get("domain", "")
    )
    every, warmup = float(args["every"]), float(args["warmup"])
    served = [
        (when, host, path)
        for when, host, path, status in access_lines((work / "access.log").read_bytes())
        if status == 200
    ]
    fetched = Counter(f"{host}{path}" for _, host, path in served)
    items = [json.loads(line)["id"] for line in (work / ITEMS).read_text().splitlines() if line]
    faults = [checkers.Fault(**{**f, "explains": tuple(f["explains"])}) for f in record["faults"]]
    reachable = [(web.logged(h, p), f"{h}/{p}") for h, p in web.reachable()]
    pages = [page for page, _ in reachable]
    seen, orphans, false_positives = _bloom(record.get("bloom"), web, fetched)
    # an item per page fetched (a page never fetched is the lost-pages checker's)
    expected = [item for page, item in reachable if page in fetched]
    ok = [s for s in record["samples"] if "error" not in s]
    # the last sample is taken once the workers are stopped: what is queued then is waiting
    queued = int(ok[-1].get("queued") or 0) if ok else 0
    memory = checkers.Samples.of((s["t"], s["memory"] - s["items_memory"]) for s in ok)
    held = checkers.Samples.of(
        (s["t"], s.get("queue_memory", 0) + s.get("filter_memory", 0)) for s in ok
    )
    # the rest measured directly, where the soak did (else judged by subtraction, on held)
    rest = None
    if ok and all("other_memory" in s for s in ok):
        rest = checkers.Samples.of((s["t"], s["other_memory"] + s["buffers_memory"]) for s in ok)
    # docs/benchmarks.md: 325 B per queued request and 108 B per fingerprint at the most
    budget = ok[0]["memory"] + (325 + 108) * len(pages) if ok else 0
    rss = _per_process(ok, "rss")
    full = None  # a soak recorded before the seen cache was sampled: the fixed warm-up only
    if "seen_cache_size" in record:
        full = checkers.filled(_per_process(ok, "seen_cache"), int(record["seen_cache_size"]))
    # the hub's warm-up: the Bloom filter sized and every site found (it keeps state per site)
    warm_at = max(record["started"] + warmup, checkers.sites_found((w, h) for w, h, _ in served))
    recovery, times = checkers.recovery(
        ((when, host) for when, host, _ in served), faults,
        window=min(30.0, every / 4), within=every,
    )  # fmt: skip
    crawl_end = max((when for when, _, _ in served), default=0.0)
    verdicts = [
        checkers.lost_pages(pages, fetched, seen, orphans, false_positives, queued),
        checkers.fetched_again(fetched.elements(), faults),
        checkers.exported_once(items, expected),
        checkers.hub_memory(memory, budget, warm_at, held, rest=rest),
        checkers.worker_rss(rss, warmup=warmup, full=full),
        checkers.schedule_played(len(record["plan"]), faults, crawl_end),
        recovery,
        checkers.unexplained_errors(log_lines(work), faults),
    ]
    counts = {
        "pages": len(pages),
        "fetched": sum(fetched.values()),
        "distinct": len(fetched),
        "crawl_seconds": int(crawl_end - record["started"]) if served else 0,
    }
    return verdicts, times, counts


def _per_process(samples: list[dict[str, Any]], field: str) -> dict[str, checkers.Samples]:
    """The series of ``field`` (a process -> value mapping in each sample), per process."""
    points: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        for process, value in s.get(field, {}).items():
            points.setdefault(process, []).append((s["t"], value))
    return {process: checkers.Samples.of(series) for process, series in points.items()}


def _bloom(
    bloom: dict[str, Any] | None, web: Web, fetched: Counter[str]
) -> tuple[list[str], list[str], float]:
    """What the Bloom filter explains of the lost pages: those it answered yes for (recorded
    while the hub was up), those linked only from a lost page, and the false positives it is
    expected to have made (from its layers)."""
    if not bloom:
        return [], [], 0.0
    orphans = []
    for host, page in web.reachable():
        parent = web.parent(host, page)
        if parent and web.logged(host, page) not in fetched and web.logged(*parent) not in fetched:
            orphans.append(web.logged(host, page))
    layers = [(int(m), int(k), int(n)) for m, k, n in bloom["layers"]]
    return list(bloom["seen"]), orphans, checkers.bloom_false_positives(layers)


def log_lines(work: Path) -> list[checkers.LogLine]:
    """The ERROR-level-aware lines of every log the soak kept in ``work`` (the workers' Scrapy
    logs and the services' ``ts= level=`` lines; not the web's)."""
    lines = []
    for log in sorted(work.glob("*.log")):
        if log.name in ("access.log", "web.log"):
            continue
        for text in log.read_text(errors="replace").splitlines():
            if (m := SCRAPY_LINE.match(text)) is not None:
                when = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S").timestamp()
                lines.append(checkers.LogLine(when, log.stem, m[3], f"[{m[2]}] {m[4]}"))
            elif (m := SERVICE_LINE.match(text)) is not None:
                when = datetime.fromisoformat(m[1].replace("Z", "+00:00")).timestamp()
                lines.append(checkers.LogLine(when, log.stem, m[2], m[3]))
    return lines
