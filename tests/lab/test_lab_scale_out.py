"""Scaling out as docs/deploy.md says: a fourth machine `d` is added to inventory/hosts.yml (the
Vagrantfile follows the inventory), brought up, configured alone with `--limit d` — which also
lets it through the hub's firewall — and its workers join a crawl that is already running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from labchecks import assert_complete
from labcrawl import LabCrawl, hosts_added, per_host
from labhosts import Lab, recap, run
from labroles import tcp_probe

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1200)]

NEW = "d"
NEW_ADDRESS = "172.30.0.13"


@pytest.fixture
def inventory_with_d(lab: Lab) -> Iterator[Lab]:
    """inventory/hosts.yml with `d` in `crawlers`; afterwards d is destroyed, the file restored
    and the hub's firewall rewritten from it."""
    with hosts_added("crawlers", {NEW: NEW_ADDRESS}):
        try:
            yield Lab({**lab.hosts, NEW: NEW_ADDRESS}, lab.timings)
        finally:
            try:
                LabCrawl().reset()
            finally:
                run(["vagrant", "destroy", "-f", NEW], timeout=300, check=False)
    run(["ansible-playbook", "site.yml", "-i", "inventory", "--tags", "firewall"], timeout=600)


def test_a_machine_added_with_limit_joins_the_running_crawl(
    inventory_with_d: Lab,
    catalogue_ids: set[str],
) -> None:
    lab = inventory_with_d
    hub = lab.hosts["a"]
    run(["vagrant", "up", NEW, "--no-provision"], timeout=600)
    # The hub does not know d yet.
    assert tcp_probe(lab, NEW, hub, [6379]) == {6379: "timeout"}

    # docs/deploy.md, "Adding a worker": refresh the hub's facts, then configure d alone.
    run(
        ["ansible", "-i", "inventory", "redis:proxypool:accountpool", "-m", "ansible.builtin.setup"]
    )
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", "--limit", NEW], timeout=900)
    counts = recap(proc.stdout)
    assert set(counts) == {NEW}, counts
    assert counts[NEW]["failed"] == 0 and counts[NEW]["unreachable"] == 0
    assert tcp_probe(lab, NEW, hub, [6379, 5555, 6777]) == dict.fromkeys([6379, 5555, 6777], "open")
    assert "172.30.0.13" in lab.ssh("a", "sudo nft list set inet crawlfleet crawlers").stdout

    # A crawl runs on b and c; d's workers join it with the crawl playbook limited to d.
    crawl = LabCrawl()
    crawl.reset()
    crawl.systemctl("start", ["b", "c"])
    crawl.wait_progress(0.15)
    crawl.crawl_playbook("start", "--limit", NEW)
    view = crawl.wait_done(timeout=420)
    shares = per_host(view)
    assert shares.get(NEW, {}).get("pages", 0) > 0, shares
    assert_complete(crawl, catalogue_ids)
