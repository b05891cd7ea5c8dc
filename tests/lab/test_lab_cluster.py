"""A Redis Cluster as the crawl workers' frontier (docs/deploy.md, "A Redis Cluster as the crawl
frontier"): three more hosts, r1, r2 and r3, join the running lab in the redis_cluster group; one
run of site.yml makes them a cluster of three primaries (no replicas: three hosts), the workers'
REDIS_URL a rediss+cluster:// URL of the three nodes, and the firewall of each node opens the
cluster bus to the other two only. A second run changes nothing; the book crawl runs on the
cluster, stores every book, and every key of the crawl lives in one slot, on one node.

As production would: TLS between the hosts (the clients and the cluster bus) and the per-role
Redis ACL users (crawlfleet_tls_enabled, crawlfleet_redis_acl_enabled); the crawl-job agents are
off (crawlfleet_jobs_enabled: they do not run on a cluster yet). The hub a keeps its own Redis for
the pools and the dashboard.

About 21 minutes here beside the lab's own bring-up (converge 9.5, the second run and its check
mode 9.5, the crawl of 1000 books 1): `make lab-cluster`, not in make test."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from typing import Any

import pytest
from labcrawl import LabCrawl, hosts_added
from labhosts import Lab, changed_nothing, recap, run
from labroles import OUTSIDER, WORKER, host_python, lab_secret, tcp_probe
from redis.crc import key_slot
from support.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.cluster, pytest.mark.timeout(2400)]

NODES = {"r1": "172.30.0.16", "r2": "172.30.0.17", "r3": "172.30.0.18"}
EXTRA = [
    "-e",
    json.dumps(
        {
            "crawlfleet_tls_enabled": True,
            "crawlfleet_redis_acl_enabled": True,
            "crawlfleet_jobs_enabled": False,
        }
    ),
]
SOCKET = "/run/redis/redis-server.sock"
# What the workers' crawl looks like on the cluster, read on a worker with its REDIS_URL: the
# tagged keys of the spider ({book}:…).
CRAWL_CODE = """
import json, os
from crawlfleet.commands.export import iter_stream
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.connect import get_redis
client = get_redis(os.environ["REDIS_URL"], socket_timeout=30)
keys = SpiderKeys("book", tagged=True)
ids = [item_id for item_id, _ in iter_stream(client, keys.items)]
print(json.dumps({"ids": ids, "queued": client.exists(keys.requests),
                  "workers": client.zcard(keys.workers)}))
"""


def node_cli(lab: Lab, host: str, user: str, *command: str) -> str:
    """A command on `host`'s node over its unix socket (plain text stays on the host) as the ACL
    user `user` (cluster: the hub's internal password; operator: its own)."""
    secret = "vault_redis_password" if user == "cluster" else f"vault_redis_{user}_password"
    password = shlex.quote(lab_secret(secret))
    args = " ".join(shlex.quote(arg) for arg in command)
    cli = f"sudo env REDISCLI_AUTH={password} redis-cli -s {SOCKET} --user {user} --raw"
    return lab.ssh(host, f"{cli} {args}").stdout


def cluster_info(lab: Lab, host: str) -> dict[str, str]:
    lines = node_cli(lab, host, "cluster", "CLUSTER", "INFO").splitlines()
    return dict(line.strip().split(":", 1) for line in lines if ":" in line)


def converge(*extra: str) -> dict[str, dict[str, int]]:
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", *EXTRA, *extra], timeout=1800)
    counts = recap(proc.stdout)
    assert set(NODES) <= set(counts), proc.stdout[-3000:]
    for host, count in counts.items():
        assert (count["failed"], count["unreachable"]) == (0, 0), (host, count)
    return counts


@pytest.fixture(scope="module")
def cluster_lab(lab: Lab) -> Iterator[Lab]:
    """The lab with r1, r2 and r3 in the redis_cluster group, converged by one run of site.yml;
    the three are destroyed and inventory/hosts.yml restored afterwards (the session's lab is
    destroyed next)."""
    with hosts_added("redis_cluster", NODES):
        try:
            run(["vagrant", "up", *NODES, "--no-provision"], timeout=600)
            converge()
            yield Lab({**lab.hosts, **NODES}, lab.timings)
        finally:
            run(["vagrant", "destroy", "-f", *NODES], timeout=300, check=False)


def test_three_nodes_are_one_cluster_of_three_primaries(cluster_lab: Lab) -> None:
    lab = cluster_lab
    for host in NODES:
        info = cluster_info(lab, host)
        assert info["cluster_state"] == "ok", (host, info)
        assert (info["cluster_known_nodes"], info["cluster_size"]) == ("3", "3"), (host, info)
        assert info["cluster_slots_assigned"] == "16384", (host, info)
    nodes = node_cli(lab, "r1", "cluster", "CLUSTER", "NODES").splitlines()
    primaries = sorted(line.split()[1].split("@")[0] for line in nodes if "master" in line)
    assert primaries == sorted(f"{address}:6379" for address in NODES.values()), nodes
    # The workers reach the cluster over TLS as the crawler user, every node a start-up node.
    env = lab.ssh(WORKER, "sudo cat /etc/crawlfleet/crawler.env").stdout
    nodes_list = ",".join(f"{address}:6379" for address in NODES.values())
    assert "REDIS_URL='rediss+cluster://crawler:" in env, env
    assert f"@{nodes_list}/0?ssl_ca_certs=" in env, env
    assert lab_secret("vault_redis_password") not in env
    probe = """
import json, os, redis
from crawlfleet.hub.connect import get_redis
client = get_redis(os.environ["REDIS_URL"], socket_timeout=5)
found = {"write": client.set("{book}:check:cluster", "1"),
         "state": client.cluster_info()["cluster_state"]}
try:
    client.execute_command("CLUSTER", "FORGET", "0" * 40, target_nodes=client.get_random_node())
    found["forget"] = "ok"
except redis.exceptions.NoPermissionError:
    found["forget"] = "no permission"
client.delete("{book}:check:cluster")
print(json.dumps(found))
"""
    found = host_python(lab, WORKER, probe, worker_env=True)
    assert found == {"write": True, "state": "ok", "forget": "no permission"}, found
    # Clients at 6379 only from the crawlers (and the hub's hosts); the bus only from the nodes.
    for host, address in NODES.items():
        assert tcp_probe(lab, WORKER, address, [6379, 16379]) == {6379: "open", 16379: "timeout"}
        other = next(name for name in NODES if name != host)
        assert tcp_probe(lab, other, address, [16379]) == {16379: "open"}
        assert tcp_probe(lab, OUTSIDER, address, [6379, 16379]) == {
            6379: "timeout",
            16379: "timeout",
        }


def test_a_second_run_of_site_yml_changes_nothing(cluster_lab: Lab) -> None:
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", *EXTRA], timeout=1800)
    changed_nothing(proc, NODES)
    # Check mode on a formed cluster: nothing to change either.
    changed_nothing(run([*proc.args, "--check", "--diff"], timeout=1800), NODES)


def test_the_book_crawl_runs_on_the_cluster_in_one_slot(
    cluster_lab: Lab, catalogue_ids: set[str]
) -> None:
    lab = cluster_lab
    crawl = LabCrawl()
    crawl.systemctl("stop")
    try:
        crawl.crawl_playbook("start", *EXTRA)
        view: dict[str, Any] = {}

        def finished() -> bool:
            view.update(crawl.worker_python(CRAWL_CODE))
            return not crawl.running_units() and not view["queued"] and not view["workers"]

        wait_until(finished, "the crawl on the cluster finished", timeout=600, interval=3)
    finally:
        crawl.systemctl("stop")
    ids = view["ids"]
    assert set(ids) == catalogue_ids, (len(catalogue_ids - set(ids)), len(set(ids) - catalogue_ids))
    assert len(ids) == len(catalogue_ids), len(ids)  # nothing killed: every book once
    # Every key of the crawl on one node, in the slot of {book}; none under the untagged names.
    holders = {}
    for host in NODES:
        keys = node_cli(lab, host, "operator", "--scan", "--pattern", "*book*").split()
        if keys:
            holders[host] = keys
    assert len(holders) == 1, holders
    keys = next(iter(holders.values()))
    assert all(key.startswith("{book}:") for key in keys), keys
    assert {key_slot(key.encode()) for key in keys} == {key_slot(b"{book}")}
