"""Checks of the crawl drills: what the export and the hub's Redis must say after a crawl; crawl
jobs as an operator on the hub runs them."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from labcrawl import VENV_BIN, LabCrawl
from labhosts import ROOT, Lab, run
from labroles import HUB, restart_container
from support.waiting import wait_until

from crawlfleet.demosite.catalogue import Catalogue
from crawlfleet.demosite.config import SiteConfig

EXPORT = "/var/lib/crawlfleet/books.jsonl"
OPERATOR_ENV = "/etc/crawlfleet/operator.env"
# CONCURRENT_REQUESTS of the book crawl: at most one more batch of leases per worker process.
PREFETCH_MARGIN = 32


def catalogue_ids() -> set[str]:
    """The ids the demo site serves, computed as the site does (its size from the inventory)."""
    lab_vars = yaml.safe_load((ROOT / "inventory/group_vars/lab.yml").read_text())
    seed = SiteConfig.__dataclass_fields__["seed"].default
    return set(Catalogue(int(lab_vars["lab_demosite_books"]), seed).ids)


def exported_ids(crawl: LabCrawl) -> list[str]:
    """`crawlfleet export` on a worker, as an operator runs it; the ids of the exported books."""
    crawl.worker_shell(crawl.reader, f"crawlfleet export {crawl.spider} -o {EXPORT}")
    out = crawl.ssh(crawl.reader, f"sudo cat {EXPORT}; sudo rm -f {EXPORT}").stdout
    return [json.loads(line)["id"] for line in out.splitlines() if line.strip()]


def assert_complete(crawl: LabCrawl, expected: set[str], in_flight_bound: int = 0) -> None:
    """Every book exactly once in the export; the stream holds duplicates only up to the bound."""
    ids = exported_ids(crawl)
    assert len(ids) == len(set(ids)), Counter(ids).most_common(3)
    assert set(ids) == expected, (len(expected - set(ids)), len(set(ids) - expected))
    stream = crawl.item_ids()
    assert set(stream) == expected
    assert len(stream) - len(expected) <= in_flight_bound, (len(stream), len(expected))
    view = crawl.snapshot()
    assert (view["queued"], view["leased"], view["deadletter"]) == (0, 0, 0), view


def in_flight(view: dict[str, Any], *hosts: str) -> int:
    """Requests the hosts' workers held (leased) in a snapshot, plus one prefetch batch each
    (leases taken between the snapshot and the disruption)."""
    rows = [row for row in view["workers"] if row["host"] in hosts and row["alive"]]
    return sum(row["leased"] for row in rows) + PREFETCH_MARGIN * len(rows)


def assert_survives_worker_kill(
    lab: Lab, crawl: LabCrawl, expected: set[str], victim: str, survivor: str
) -> None:
    """The worker-kill drill: both workers crawl, `victim`'s host is SIGKILLed mid-crawl and
    `survivor` alone finishes, picking up the victim's requests once their leases expire; every
    book once, duplicates bounded by what the victim held. The victim's host is booted again."""
    crawl.systemctl("start", (victim, survivor))
    before = crawl.wait_progress(0.3)
    crawl.reader = survivor  # the hub is read through a live worker
    run(["docker", "kill", "--signal", "KILL", f"crawlfleet-{victim}"], timeout=60)
    try:
        view = crawl.wait_done(timeout=420, hosts=[survivor])
        assert view["requeued"] > 0, view
        assert_complete(crawl, expected, in_flight_bound=in_flight(before, victim))
    finally:
        run(["docker", "start", f"crawlfleet-{victim}"], timeout=120)
        restart_container(lab, victim)


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CLOCK_DROP_IN = "/run/systemd/system/crawler@{spider}-1.service.d/clock.conf"


def install_faketime(crawl: LabCrawl, host: str) -> None:
    """libfaketime on a worker (Debian's faketime), to run a process with a clock of its own."""
    crawl.ssh(host, "command -v faketime || sudo apt-get install -y -q faketime", timeout=300)


@contextlib.contextmanager
def clock_ahead(crawl: LabCrawl, host: str, offset: str = "+3h") -> Iterator[None]:
    """crawler@<spider>-1 on `host` runs with its clock `offset` ahead (a runtime drop-in)."""
    install_faketime(crawl, host)
    drop_in = CLOCK_DROP_IN.format(spider=crawl.spider)
    content = f"[Service]\nEnvironment=LD_PRELOAD={FAKETIME_LIB} FAKETIME={offset}\n"
    crawl.ssh(
        host,
        f"sudo mkdir -p {Path(drop_in).parent} && printf '{content}' | sudo tee {drop_in}"
        " >/dev/null && sudo systemctl daemon-reload",
    )
    try:
        yield
    finally:
        crawl.ssh(host, f"sudo rm -f {drop_in} && sudo systemctl daemon-reload")


def operator(lab: Lab, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`crawlfleet ARGS` as an operator runs it on the hub (docs/operating.md: operator.env)."""
    inner = f"set -a; . {OPERATOR_ENV}; set +a; {VENV_BIN}/crawlfleet {shlex.join(args)}"
    return lab.ssh(HUB, f"sudo sh -c {shlex.quote(inner)}", check=check, timeout=180)


def job_record(lab: Lab, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(operator(lab, "job", "show", job_id, "--json").stdout)
    return found


def job_ended(lab: Lab, job_id: str, timeout: float = 120) -> dict[str, Any]:
    """The job's record once the agents have reported its end."""
    wait_until(
        lambda: job_record(lab, job_id)["state"] in ("finished", "failed"),
        f"job {job_id} ended",
        timeout,
        interval=1,
    )
    return job_record(lab, job_id)


def start_book_job(lab: Lab) -> str:
    """`crawlfleet job start bookcrawler book` on b and c; the job's id."""
    out = operator(lab, "job", "start", "bookcrawler", "book", "--workers", "all").stdout
    found = re.match(r"job (\d+): bookcrawler/book running on 2 worker\(s\) \(b, c\)", out)
    assert found, out
    return found.group(1)
