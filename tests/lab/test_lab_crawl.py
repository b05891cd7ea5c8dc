"""The book crawl on the lab, end to end: workers b and c crawl the demo site through the proxy
pool's proxies with the account pool's tokens (one of them with its clock hours ahead), and the
drills of docs/design.md — a worker killed, every worker stopped and started, the hub's Redis
restarted, a rolling restart — lose nothing. Each test asserts on the exported items and on the
hub's Redis, never on log lines."""

from __future__ import annotations

import pytest
from labchecks import assert_complete, assert_survives_worker_kill, clock_ahead, in_flight
from labcrawl import LabCrawl, per_host
from labhosts import Lab, run
from labroles import HUB_SERVER

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

WORKERS = ("b", "c")


def start_workers(crawl: LabCrawl, hosts: tuple[str, ...] = WORKERS) -> None:
    crawl.systemctl("start", hosts)


def test_the_book_crawl_collects_every_book_once_with_both_workers(
    crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    # Started the way docs/deploy.md says, with the crawl playbook (it checks the hub first). b's
    # worker runs with its clock three hours ahead: leases and heartbeats use the hub's clock.
    with clock_ahead(crawl, "b", "+3h"):
        crawl.crawl_playbook("start")
        view = crawl.wait_done(timeout=420)
    assert view["total"] == len(catalogue_ids)
    assert_complete(crawl, catalogue_ids)
    shares = per_host(view)
    pages = sum(entry["pages"] for entry in shares.values())
    assert set(shares) == set(WORKERS), shares
    for host, entry in shares.items():
        assert entry["pages"] >= 0.25 * pages, (host, shares)
    # The pools did their part: requests went through proxies and carried tokens.
    scrapy = [row["scrapy"] for row in view["workers"]]
    assert sum(s.get("proxy/assigned", 0) for s in scrapy) >= pages
    assert sum(s.get("auth/assigned", 0) for s in scrapy) >= pages
    # Nobody's lease was taken for expired: no request went back to the queue.
    assert view["requeued"] == 0, view


def test_a_worker_killed_mid_crawl_loses_nothing(
    lab: Lab, crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    assert_survives_worker_kill(lab, crawl, catalogue_ids, victim="b", survivor="c")


def test_every_worker_stopped_and_started_resumes_the_crawl(
    crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    start_workers(crawl)
    crawl.wait_progress(0.3)
    crawl.crawl_playbook("stop")
    stopped = crawl.snapshot()
    assert not crawl.running_units()
    # SIGTERM drained the workers: what they held went back, nothing is leased, work is left.
    assert stopped["leased"] == 0 and stopped["queued"] > 0, stopped
    assert stopped["items"] < len(catalogue_ids)
    crawl.crawl_playbook("start")
    crawl.wait_done(timeout=420)
    # A drained worker finishes what it has in flight: nothing is crawled twice.
    assert_complete(crawl, catalogue_ids, in_flight_bound=0)


def test_the_hub_redis_restarted_mid_crawl_loses_nothing(
    crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    start_workers(crawl)
    before = crawl.wait_progress(0.3)
    crawl.ssh("a", f"sudo systemctl restart {HUB_SERVER}", timeout=120)
    crawl.wait_done(timeout=420)
    assert_complete(crawl, catalogue_ids, in_flight_bound=in_flight(before, *WORKERS))


def test_a_rolling_restart_during_the_crawl_loses_nothing(
    crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    start_workers(crawl)
    before = crawl.wait_progress(0.1)
    proc = run(
        [
            "ansible-playbook", "ansible/playbooks/rolling-restart.yml", "-i", "inventory",
            "-e", "rolling_restart_settle=3",
        ],
        timeout=600,
    )  # fmt: skip
    assert "failed=0" in proc.stdout
    view = crawl.wait_done(timeout=420)
    # The roll happened during the crawl: restarted workers came back as new worker processes.
    assert len(view["workers"]) > len(WORKERS), [row["id"] for row in view["workers"]]
    # Drained with SIGTERM, a worker finishes what it holds; the bound covers a slow drain.
    assert_complete(crawl, catalogue_ids, in_flight_bound=in_flight(before, *WORKERS))
