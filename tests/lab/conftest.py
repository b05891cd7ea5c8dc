"""The lab tier's fixture: a real three-host lab (containers running systemd, brought up by
``vagrant up`` with the docker provider, provisioned by site.yml), always destroyed at the end."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

# scripts/labcrawl.py drives crawls for `make demo`, these tests and the lab benchmark (scripts/
# is on the path through pytest.ini's pythonpath).
from labchecks import catalogue_ids as read_catalogue_ids
from labcrawl import LabCrawl
from labhosts import TIMINGS, Lab, lab_hosts, leftovers, recap, run

# The lab is one shared state: tests that only look come first, crawl drills next, and adding a
# machine (which changes the inventory) last.
MODULE_ORDER = [
    "test_lab_inventory_check",
    "test_lab_project_checks",
    "test_lab_hosts",
    "test_lab_roles",
    "test_lab_privileges",
    "test_lab_preflight",
    "test_lab_crawl",
    "test_lab_jobs",
    "test_lab_serialization",
    "test_lab_rabbitmq",
    "test_lab_projects",
    "test_lab_hub_security",
    "test_lab_scale_out",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.module.__name__ if item.module else ""
        return MODULE_ORDER.index(name) if name in MODULE_ORDER else len(MODULE_ORDER)

    items.sort(key=rank)  # stable: each module keeps its own order


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """From a clean state: image, ``vagrant up`` (provisions with site.yml); always destroyed.

    LAB_REUSE=1 (for working on these tests) uses the running lab as it is and leaves it up."""
    if os.environ.get("LAB_REUSE") == "1":
        yield Lab(lab_hosts(), {})
        return
    run(["scripts/lab.sh", "down"], timeout=300)
    try:
        timings: dict[str, float] = {}
        start = time.monotonic()
        run(["scripts/lab-image.sh"], timeout=900)
        timings["image_s"] = time.monotonic() - start
        start = time.monotonic()
        up = run(["vagrant", "up", "--provider", "docker"], timeout=900)
        timings["vagrant_up_and_converge_s"] = time.monotonic() - start
        counts = recap(up.stdout)
        assert counts, f"vagrant up ran no playbook:\n{up.stdout[-3000:]}"
        assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), counts
        yield Lab(lab_hosts(), timings)
    finally:
        start = time.monotonic()
        down = run(["scripts/lab.sh", "down"], timeout=300, check=False)
        timings["down_s"] = time.monotonic() - start
        TIMINGS.parent.mkdir(exist_ok=True)
        TIMINGS.write_text(
            json.dumps({k: round(v, 1) for k, v in timings.items()}, indent=2) + "\n"
        )
        left = leftovers()
        if down.returncode != 0 or left:
            output = down.stdout + down.stderr
            pytest.fail(f"lab.sh down exited {down.returncode}, left behind: {left}\n{output}")


@pytest.fixture(scope="session")
def catalogue_ids() -> set[str]:
    """The book ids the lab's demo site serves."""
    return read_catalogue_ids()


@pytest.fixture
def crawl(lab: Lab) -> Iterator[LabCrawl]:
    """A crawl from zero: every crawler unit stopped, the spider's keys purged (before, after)."""
    crawl = LabCrawl()
    crawl.reset()
    yield crawl
    crawl.reset()
