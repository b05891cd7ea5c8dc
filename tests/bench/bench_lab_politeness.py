"""Lab benchmark, politeness (issue 16): the `make demo` crawl with 2 worker hosts, then with 3.

The crawl is the demo's, unchanged: the lab's demo site limits and bans each client address
(`lab_demosite_rate_limit`, 20 API requests/s), two forward proxies (two addresses, so the site
allows the crawl 2 x 20 = 40 requests/s), both pools, the crawler role's settings with no
`DOWNLOAD_DELAY` - the cluster-wide politeness budget paces it. Each crawl starts from zero
(`LabCrawl.reset`) and is started as the demo starts it (`crawl.yml`). The 3-host crawls add a
worker `d` the way docs/deploy.md says ("Adding a worker": `site.yml --limit d`); it is destroyed
at the end. Adding a worker when the proxies bind must not lower the pace or raise the bans.

Per crawl: the pace while requests waited (the median of the 3-second polls that began with
requests queued: Scrapy's start-up and the idle close left out, as the demo's summary reports it)
and over the whole crawl, each as a fraction of the proxy-bound limit; the responses the site
refused (403/429) against all responses; the books collected once. Uses a running lab if there is
one (`scripts/lab.sh up` reuses it) and leaves it running; a lab it brought up itself it takes
down at the end. Needs root (Docker).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from typing import Any

from labcrawl import ROOT, LabCrawl, LiveView, per_host, scrapy_total, worker_added
from labcrawl import run as lab_run

SECTION = "lab: politeness (issue 16)"
NEW, NEW_ADDRESS = "d", "172.30.0.13"


def one_crawl(timeout: float = 600) -> dict[str, float]:
    crawl = LabCrawl()
    crawl.reset()
    started = time.monotonic()
    crawl.crawl_playbook("start")
    live = LiveView(started)
    view = crawl.wait_done(timeout, on_poll=live, interval=3)
    elapsed = time.monotonic() - started
    ids = crawl.item_ids()
    allowed = (view.get("pools") or {}).get("proxypool", {}).get("count") or 0
    allowed *= crawl.site_rate_limit()
    pages = sum(entry["pages"] for entry in per_host(view).values())
    responses = scrapy_total(view, "downloader/response_count")
    refused = sum(
        scrapy_total(view, f"downloader/response_status_count/{code}") for code in (403, 429)
    )
    busy = statistics.median(live.busy_rates) if live.busy_rates else 0.0
    return {
        "allowed": allowed,
        "busy": busy / allowed if allowed else 0.0,
        "overall": pages / elapsed / allowed if allowed else 0.0,
        "refused": refused / responses if responses else 0.0,
        "once": float(len(set(ids)) == int(view.get("total") or -1)),
        "elapsed": elapsed,
        "pages": pages,
    }


def run(ctx: Any) -> list[dict[str, Any]]:
    repeats = 1 if ctx.quick else 2
    rows: list[dict[str, Any]] = []

    def measure(hosts: int) -> None:
        for attempt in range(1, repeats + 1):
            c = one_crawl()
            scenario = f"demo crawl, {hosts} worker hosts, run {attempt}"
            note = (
                f"{c['pages']:.0f} pages in {c['elapsed']:.0f} s; proxy-bound limit "
                f"{c['allowed']:.0f} requests/s; every book once: {'yes' if c['once'] else 'NO'}"
            )
            for metric, value, unit in (
                ("pace while requests waited ÷ proxy-bound limit", c["busy"], "ratio"),
                ("pace over the whole crawl ÷ proxy-bound limit", c["overall"], "ratio"),
                ("responses refused by the site (403/429)", 100 * c["refused"], "%"),
            ):
                rows.append(
                    {"section": SECTION, "scenario": scenario, "metric": metric,
                     "value": round(value, 3), "unit": unit, "note": note}
                )  # fmt: skip

    running = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=crawlfleet.lab={ROOT}"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    lab_run(["scripts/lab.sh", "up"], timeout=1800)
    measure(2)
    with worker_added(NEW, NEW_ADDRESS, timeout=1800):
        measure(3)
    if not running:
        lab_run(["scripts/lab.sh", "down"], timeout=600)
    return rows
