"""Lab benchmark: how long the appliance takes to deploy and how the crawl scales with worker hosts.

From a destroyed lab: `vagrant up` (machines + site.yml, the fresh converge), an idempotent
re-run of site.yml, adding a worker `d` with `--limit d` (docs/deploy.md), then the
book crawl with 1, 2 and 3 worker hosts (one process each) against a demo site that answers
every request after a fixed latency and bans nobody, so that one worker is bound by latency
and concurrency rather than by this machine's two cores. Scaling efficiency = pages/s with N
hosts / (N x pages/s with one). The lab is destroyed at the end. Needs root (Docker).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from labcrawl import LabCrawl, worker_added
from labcrawl import run as lab_run

ROOT = Path(__file__).resolve().parents[2]

SECTION = "lab: deploy and scale-out"
NEW, NEW_ADDRESS = "d", "172.30.0.13"
LATENCY_MS = 250
CONCURRENCY = 4


def timed(args: list[str], timeout: float = 1200) -> float:
    start = time.monotonic()
    lab_run(args, timeout=timeout)
    return time.monotonic() - start


def crawl_rate(hosts: list[str], books: int) -> tuple[float, float, int]:
    """(pages/s from the first stored item to the last, wall seconds, pages) of one crawl."""
    crawl = LabCrawl()
    crawl.reset()
    start = time.monotonic()
    crawl.systemctl("start", hosts)
    marks: dict[str, float] = {}

    def note(view: dict[str, Any]) -> None:
        items = view.get("items") or 0
        if items > 0:
            marks.setdefault("first", time.monotonic())
        if items >= books:
            marks.setdefault("last", time.monotonic())

    view = crawl.wait_done(timeout=900, on_poll=note, interval=0.5, hosts=hosts)
    wall = time.monotonic() - start
    if (view.get("items") or 0) != books or "first" not in marks:
        raise RuntimeError(f"crawl with {hosts} collected {view.get('items')} of {books} books")
    pages = int(view.get("acked") or 0)
    crawl.reset()
    return pages / max(marks["last"] - marks["first"], 1e-3), wall, pages


def run(ctx: Any) -> list[dict[str, Any]]:
    books = 300 if ctx.quick else 1000
    rows: list[dict[str, Any]] = []

    def row(scenario: str, metric: str, value: float, unit: str, note: str = "") -> None:
        rows.append(
            {"section": SECTION, "scenario": scenario, "metric": metric,
             "value": round(value, 2), "unit": unit, "note": note}
        )  # fmt: skip

    lab_run(["scripts/lab.sh", "down"], timeout=600)
    lab_run(["scripts/lab-image.sh"], timeout=1200)
    row("vagrant up (5 machines) + site.yml", "wall time", timed(["vagrant", "up"]), "s",
        "fresh converge: machines created, every role applied")  # fmt: skip
    row("site.yml again", "wall time", timed(["ansible-playbook", "site.yml"]), "s",
        "idempotent re-run: changed=0")  # fmt: skip

    bench_vars = [
        "-e", f"lab_demosite_books={books}", "-e", "lab_demosite_rate_limit=0",
        # Replaces the lab's crawler_extra_env: no download delay, the site bans nobody.
        "-e", f'{{"lab_demosite_extra_env": {{"DEMOSITE_LATENCY_MS": "{LATENCY_MS}"}}}}',
        "-e", f'{{"crawler_extra_env": {{"CRAWLER_CONCURRENT_REQUESTS": "{CONCURRENCY}"}}}}',
    ]  # fmt: skip
    with worker_added(NEW, NEW_ADDRESS) as limit_seconds:
        row("add worker d: site.yml --limit d", "wall time", limit_seconds, "s",
            "machine already up; common, release, crawler, firewall admission")  # fmt: skip
        timed(["ansible-playbook", "site.yml", "--tags", "lab,crawlers", *bench_vars])
        rates = {}
        for hosts in (["b"], ["b", "c"], ["b", "c", NEW]):
            rate, wall, pages = crawl_rate(hosts, books)
            rates[len(hosts)] = rate
            note = (f"{books} books, {pages} pages, {LATENCY_MS} ms per response, "
                    f"CONCURRENT_REQUESTS={CONCURRENCY}, {wall:.0f} s wall")  # fmt: skip
            row(f"crawl with {len(hosts)} worker host(s)", "pages/s", rate, "pages/s", note)
        for n in (2, 3):
            row(f"crawl with {n} worker hosts", "scaling efficiency",
                rates[n] / (n * rates[1]), "ratio",
                "pages/s with N hosts / (N x pages/s with one)")  # fmt: skip
    lab_run(["scripts/lab.sh", "down"], timeout=600)
    return rows
