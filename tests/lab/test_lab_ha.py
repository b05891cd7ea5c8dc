"""The hub without a single point of failure (docs/deploy.md, "Three hubs: Sentinel failover"): two
more hub hosts, a2 and a3, join the redis group of the running lab, one run of site.yml turns the
single hub into one primary, two replicas and three Sentinels, and every service reaches Redis
through the Sentinels. Then the primary's host is killed (`docker kill`) mid-crawl: the Sentinels
promote a replica, the workers and the pools follow it without a restart, and the crawl finishes
with every book exactly once beyond what was in flight.

The primary starts on a, which also runs the pools; a planned switchover (SENTINEL FAILOVER, as for
maintenance) moves it to a2 or a3 - after which a second run of site.yml must change nothing - so
that the host killed is a Redis host only.

About 12 minutes here (the lab, the two hubs, converge, the drill): `make lab-ha`, not in make
test. What it measured (failover time, pages crawled twice) is written to .lab/ha-drill.json."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterator

import pytest
from labchecks import assert_complete, in_flight
from labcrawl import LabCrawl, hosts_added
from labhosts import ROOT, Lab, changed_tasks, recap, run
from labroles import HUB, WORKER, host_python, lab_secret, tcp_probe
from support.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.ha, pytest.mark.timeout(2400)]

NEW_HUBS = {"a2": "172.30.0.14", "a3": "172.30.0.15"}
SERVICE = "crawlfleet"
RESULTS = ROOT / ".lab/ha-drill.json"
# How the drill polls the Sentinels and the hosts (each poll is an ssh round trip).
POLL = {"timeout": 120.0, "interval": 0.5}


def sentinel(lab: Lab, host: str, *command: str, check: bool = True) -> list[str]:
    """A Sentinel command on `host`'s own Sentinel; its --raw reply as lines."""
    password = shlex.quote(lab_secret("vault_redis_password"))
    args = " ".join(shlex.quote(arg) for arg in command)
    proc = lab.ssh(host, f"REDISCLI_AUTH={password} redis-cli -p 26379 --raw {args}", check=check)
    return proc.stdout.splitlines()


def master_view(lab: Lab, host: str) -> dict[str, str]:
    lines = sentinel(lab, host, "SENTINEL", "MASTER", SERVICE)
    return dict(zip(lines[0::2], lines[1::2], strict=True))


def primary(lab: Lab, host: str) -> str:
    """The address `host`'s Sentinel names as primary ('' when it cannot say)."""
    lines = sentinel(lab, host, "SENTINEL", "get-master-addr-by-name", SERVICE, check=False)
    return lines[0] if len(lines) == 2 else ""


@pytest.fixture(scope="module")
def ha_lab(lab: Lab) -> Iterator[Lab]:
    """The lab with a2 and a3 in the redis group, converged by one run of site.yml; a2 and a3 are
    destroyed and inventory/hosts.yml restored afterwards (the session's lab is destroyed next)."""
    with hosts_added("redis", NEW_HUBS):
        try:
            run(["vagrant", "up", *NEW_HUBS, "--no-provision"], timeout=600)
            proc = run(["ansible-playbook", "site.yml", "-i", "inventory"], timeout=1800)
            counts = recap(proc.stdout)
            assert set(NEW_HUBS) <= set(counts), counts
            for host, count in counts.items():
                assert (count["failed"], count["unreachable"]) == (0, 0), (host, count)
            yield Lab({**lab.hosts, **NEW_HUBS}, lab.timings)
        finally:
            run(["vagrant", "destroy", "-f", *NEW_HUBS], timeout=300, check=False)


def test_three_hubs_are_one_primary_two_replicas_and_three_sentinels(ha_lab: Lab) -> None:
    hubs = [HUB, *NEW_HUBS]
    first = ha_lab.hosts[HUB]
    for host in hubs:
        assert ha_lab.ssh(host, "systemctl is-active redis-sentinel").stdout.strip() == "active"
        view = master_view(ha_lab, host)
        assert view["ip"] == first, (host, view)
        assert (view["num-slaves"], view["num-other-sentinels"], view["quorum"]) == (
            "2",
            "2",
            "2",
        ), (host, view)
    password = shlex.quote(lab_secret("vault_redis_password"))
    for host in NEW_HUBS:
        role = ha_lab.ssh(host, f"REDISCLI_AUTH={password} redis-cli -p 6379 --raw ROLE").stdout
        assert role.splitlines()[:2] == ["slave", first], (host, role)
    # Every service reaches Redis through the Sentinels, and the replicas refuse writes.
    env = ha_lab.ssh(WORKER, "sudo cat /etc/crawlfleet/crawler.env").stdout
    assert "REDIS_URL='redis+sentinel://:" in env and "/crawlfleet/0?sentinel_password=" in env
    code = """
import json, os
from crawlfleet.redisconn import get_redis
client = get_redis(os.environ["REDIS_URL"], socket_timeout=5)
client.set("crawlfleet:check:ha", "1")
print(json.dumps(client.info("replication")["role"]))
"""
    assert host_python(ha_lab, WORKER, code, worker_env=True) == "master"
    # Only cluster hosts reach the Sentinels and the replicas.
    for host in NEW_HUBS:
        address = ha_lab.hosts[host]
        assert tcp_probe(ha_lab, WORKER, address, [6379, 26379]) == {6379: "open", 26379: "open"}
        assert tcp_probe(ha_lab, "web", address, [6379, 26379]) == {
            6379: "timeout",
            26379: "timeout",
        }


def switch_over(lab: Lab) -> str:
    """A planned switchover (SENTINEL FAILOVER, as for maintenance of the primary's host): the
    name of the new primary's host, once the old primary is its replica."""
    old = primary(lab, HUB)
    assert sentinel(lab, HUB, "SENTINEL", "FAILOVER", SERVICE) == ["OK"]
    wait_until(lambda: primary(lab, HUB) not in ("", old), "a replica promoted", **POLL)
    wait_until(lambda: replicas(lab) == 2, "the old primary back as a replica", **POLL)
    return next(name for name, address in lab.hosts.items() if address == primary(lab, HUB))


def replicas(lab: Lab) -> int:
    return int(master_view(lab, HUB).get("num-slaves") or 0)


def test_after_a_switchover_a_second_run_of_site_yml_changes_nothing(ha_lab: Lab) -> None:
    # The Sentinels reconfigured every server; the role follows them and rewrites nothing.
    assert switch_over(ha_lab) in NEW_HUBS
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", "--check", "--diff"], 1800)
    counts = recap(proc.stdout)
    assert set(NEW_HUBS) <= set(counts), proc.stdout[-3000:]
    changed = changed_tasks(proc.stdout)
    for host, count in counts.items():
        assert (count["changed"], count["failed"], count["unreachable"]) == (0, 0, 0), (
            host,
            count,
            changed,
        )


def test_the_primary_host_killed_mid_crawl_fails_over_and_loses_nothing(
    ha_lab: Lab, catalogue_ids: set[str]
) -> None:
    lab = ha_lab
    # The host killed runs Redis only (a runs the pools): after the switchover above, or now.
    victim_address = primary(lab, HUB)
    victim = next(name for name, address in lab.hosts.items() if address == victim_address)
    if victim not in NEW_HUBS:
        victim = switch_over(lab)
        victim_address = lab.hosts[victim]

    crawl = LabCrawl()
    crawl.reset()
    try:
        crawl.systemctl("start")
        before = crawl.wait_progress(0.3)
        killed = time.monotonic()
        run(["docker", "kill", f"crawlfleet-{victim}"], timeout=60)
        wait_until(
            lambda: primary(lab, HUB) not in ("", victim_address),
            "a replica promoted after the kill",
            **POLL,
        )
        promoted = time.monotonic() - killed
        code = """
import json, os
from crawlfleet.redisconn import get_redis
get_redis(os.environ["REDIS_URL"], socket_timeout=3).set("crawlfleet:check:ha", "2")
print(json.dumps("ok"))
"""
        wait_until(
            lambda: host_python(lab, WORKER, code, worker_env=True) == "ok",
            "a write through the Sentinels",
            **POLL,
        )
        writable_after = time.monotonic() - killed
        view = crawl.wait_done(timeout=600)
        bound = in_flight(before, *crawl.crawlers)
        assert_complete(crawl, catalogue_ids, in_flight_bound=bound)
        # The pools followed the new primary too.
        health = f"""
import json, urllib.request
base = "http://{lab.hosts[HUB]}"
print(json.dumps([urllib.request.urlopen(f"{{base}}:{{port}}/health", timeout=5).status
                  for port in (5555, 6777)]))
"""
        assert host_python(lab, HUB, health) == [200, 200]
        twice = len(crawl.item_ids()) - len(catalogue_ids)
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(
            json.dumps(
                {
                    "killed": victim,
                    "promoted_after_s": round(promoted, 1),
                    "first_write_after_s": round(writable_after, 1),
                    "books": len(catalogue_ids),
                    "items_written_twice": twice,
                    "in_flight_bound": bound,
                    "requeued": view.get("requeued"),
                },
                indent=2,
            )
            + "\n"
        )
    finally:
        crawl.reset()
