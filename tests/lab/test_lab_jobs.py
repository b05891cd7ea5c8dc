"""Crawl jobs on the lab (docs/jobs.md): an operator on the hub starts the book crawl as a job on
b and c through their agents (the crawler role's systemd units), drains it with `job stop`, a
second job carries on from the queue and collects every book once, and a schedule fires during
the test, started by the hub's scheduler. Asserted on the job records, the hub's Redis and the
exported items, never on log lines."""

from __future__ import annotations

import json
import re

import pytest
from labchecks import assert_complete, job_ended, operator, start_book_job
from labcrawl import LabCrawl
from labhosts import Lab
from labroles import HUB
from support.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

WORKERS = ("b", "c")


def test_agents_and_the_scheduler_run_sandboxed_on_the_hosts(lab: Lab) -> None:
    """An agent on each worker (root, for systemctl, but with no capability and a read-only
    system), the scheduler on the hub under its own account."""
    for host in WORKERS:
        shown = lab.ssh(
            host,
            "systemctl show -p ActiveState -p User -p CapabilityBoundingSet -p ProtectSystem"
            " crawlfleet-agent",
        ).stdout.split()
        assert sorted(shown) == [
            "ActiveState=active",
            "CapabilityBoundingSet=",
            "ProtectSystem=strict",
            "User=",
        ], (host, shown)
    shown = lab.ssh(HUB, "systemctl show -p ActiveState -p User crawlfleet-scheduler").stdout
    assert sorted(shown.split()) == ["ActiveState=active", "User=crawlfleet-scheduler"], shown


def test_a_job_runs_on_b_and_c_drains_carries_on_and_a_schedule_fires(
    lab: Lab, crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    first = start_book_job(lab)
    # The agents started the crawler role's own units.
    wait_until(
        lambda: set(crawl.running_units()) == set(WORKERS), "units on b and c", 60, interval=1
    )
    crawl.wait_progress(0.3)
    stopped = operator(lab, "job", "stop", first).stdout
    assert stopped.startswith(f"job {first} stopped (finished): "), stopped
    done = job_ended(lab, first)
    assert done["state"] == "finished" and done["stopped_by"], done
    # Drained: nothing leased, the rest still queued, no unit left running.
    view = crawl.snapshot()
    assert view["leased"] == 0 and view["queued"] > 0, view
    assert not crawl.running_units()
    # A second operator stopping the same job: a no-op that says so.
    again = operator(lab, "job", "stop", first).stdout
    assert again.strip() == f"job {first} has already ended (finished)", again

    # The next job carries on from the queue and the crawl ends by itself: every book once.
    second = start_book_job(lab)
    crawl.wait_done(timeout=420)
    assert_complete(crawl, catalogue_ids, in_flight_bound=0)
    done = job_ended(lab, second)
    assert done["state"] == "finished", done
    shares = {host: done["stats"]["per_worker"][host]["pages"] for host in WORKERS}
    assert all(pages > 0 for pages in shares.values()), done["stats"]
    # The last lines of each unit within the job's times: Scrapy's close and systemd's end.
    logs = operator(lab, "job", "logs", second, "-n", "5").stdout
    for host in WORKERS:
        block = logs.split(f"== {host} crawler@book-1\n")[1].split("== ")[0]
        assert "Spider closed (finished)" in block and "Deactivated successfully" in block, logs

    # A schedule that keeps the duplicate filter fires within the test: its job finds every
    # book seen, crawls nothing new and ends by itself.
    added = operator(
        lab, "schedule", "add", "bookcrawler", "book", "--every", "20s", "--keep-dupefilter"
    ).stdout
    found = re.match(r"schedule (\d+): bookcrawler/book every 20s, keep duplicate filter", added)
    assert found, added
    schedule = found.group(1)
    fired: list[str] = []

    def scheduled() -> bool:
        listed = json.loads(operator(lab, "job", "list", "--json").stdout)
        fired[:] = [str(j["id"]) for j in listed if j.get("schedule") == schedule]
        return bool(fired)

    try:
        wait_until(scheduled, f"schedule {schedule} fired a job", timeout=120, interval=2)
    finally:
        operator(lab, "schedule", "remove", schedule)
    done = job_ended(lab, fired[-1], timeout=300)
    assert (done["state"], done["by"], done["dupefilter"]) == (
        "finished",
        f"schedule {schedule}",
        "keep",
    ), done
    assert_complete(crawl, catalogue_ids, in_flight_bound=0)
