"""The hub without a single point of failure (docs/deploy.md, "Three hubs: Sentinel failover"): two
more hub hosts, a2 and a3, join the redis group of the running lab, one run of site.yml turns the
single hub into one primary, two replicas and three Sentinels, and every service reaches Redis
through the Sentinels. Then the primary's host is killed (`docker kill`) mid-crawl: the Sentinels
promote a replica, the workers and the pools follow it without a restart, and the crawl finishes
with every book exactly once beyond what was in flight.

The three hubs run as production would: TLS between the hosts and the per-role Redis ACL users
(crawlfleet_tls_enabled, crawlfleet_redis_acl_enabled). The replicas log in to the primary as
`replica`, the Sentinels to the servers as `sentinel`, every service to the Sentinels as its own
user, which may find the primary and nothing more; a plain-text client is refused everywhere.

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
from labhosts import ROOT, Lab, changed_nothing, recap, run
from labroles import HUB, WORKER, host_python, lab_secret, tcp_probe
from support.waiting import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.ha, pytest.mark.timeout(2400)]

NEW_HUBS = {"a2": "172.30.0.14", "a3": "172.30.0.15"}
SECURE = ["-e", json.dumps({"crawlfleet_tls_enabled": True, "crawlfleet_redis_acl_enabled": True})]
CA_FILE = "/etc/crawlfleet/tls/ca.crt"
SOCKET = "/run/redis/redis-server.sock"
SERVICE = "crawlfleet"
RESULTS = ROOT / ".lab/ha-drill.json"
# How the drill polls the Sentinels and the hosts (each poll is an ssh round trip).
POLL = {"timeout": 120.0, "interval": 0.5}


def sentinel(lab: Lab, host: str, *command: str, check: bool = True) -> list[str]:
    """A Sentinel command on `host`'s own Sentinel; its --raw reply as lines."""
    password = shlex.quote(lab_secret("vault_redis_password"))
    args = " ".join(shlex.quote(arg) for arg in command)
    cli = f"redis-cli -h 127.0.0.1 -p 26379 --tls --cacert {CA_FILE} --raw"
    proc = lab.ssh(host, f"REDISCLI_AUTH={password} {cli} {args}", check=check)
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
            proc = run(["ansible-playbook", "site.yml", "-i", "inventory", *SECURE], timeout=1800)
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
        # the hub's sentinel ACL user, over the unix socket (plain text stays on the host)
        cli = f"sudo env REDISCLI_AUTH={password} redis-cli -s {SOCKET} --user sentinel --raw"
        role = ha_lab.ssh(host, f"{cli} ROLE").stdout
        assert role.splitlines()[:2] == ["slave", first], (host, role)
    # Every service reaches Redis through the Sentinels as its own user, over TLS.
    env = ha_lab.ssh(WORKER, "sudo cat /etc/crawlfleet/crawler.env").stdout
    assert "REDIS_URL='rediss+sentinel://crawler:" in env, env
    assert "/crawlfleet/0?sentinel_username=crawler&sentinel_password=" in env, env
    assert lab_secret("vault_redis_password") not in env  # the hub's own password stays there
    code = """
import json, os
from crawlfleet.hub.connect import get_redis
client = get_redis(os.environ["REDIS_URL"], socket_timeout=5)
print(json.dumps(client.set("crawlfleet:check:ha", "1")))  # a replica answers READONLY
"""
    assert host_python(ha_lab, WORKER, code, worker_env=True) is True  # the crawler may not INFO
    operator = shlex.quote(lab_secret("vault_redis_operator_password"))
    cli = f"sudo env REDISCLI_AUTH={operator} redis-cli -s {SOCKET} --user operator --raw"
    assert ha_lab.ssh(HUB, f"{cli} GET crawlfleet:check:ha").stdout.strip() == "1"  # on a
    # The crawler's user finds the primary and cannot steer the Sentinels; plain text is refused.
    probe = f"""
import json, os, redis
from crawlfleet.hub.urls import parse_sentinel_url
target = parse_sentinel_url(os.environ["REDIS_URL"])
found = {{}}
def attempt(name, call):
    try:
        value = call()  # redis-py answers bytes: the address is compared as text
        found[name] = ["ok", value.decode() if isinstance(value, bytes) else str(value)]
    except redis.exceptions.NoPermissionError:
        found[name] = ["no permission"]
    except (redis.exceptions.ConnectionError, OSError) as exc:
        found[name] = ["connection", type(exc).__name__]
for host in {list(NEW_HUBS.values())!r}:
    tls = redis.Redis(host, 26379, username=target.sentinel_username,
                      password=target.sentinel_password, ssl=True,
                      ssl_ca_certs={CA_FILE!r}, socket_timeout=5)
    attempt(host + " find", lambda: tls.sentinel_get_master_addr_by_name({SERVICE!r})[0])
    attempt(host + " failover", lambda: tls.execute_command("SENTINEL", "FAILOVER", {SERVICE!r}))
    for port in (6379, 26379):
        plain = redis.Redis(host, port, username="crawler", password=target.sentinel_password,
                            socket_timeout=5, socket_connect_timeout=5)
        attempt(f"{{host}}:{{port}} plain", plain.ping)
print(json.dumps(found))
"""
    found = host_python(ha_lab, WORKER, probe, worker_env=True)
    for address in NEW_HUBS.values():
        assert found[f"{address} find"] == ["ok", first], found
        assert found[f"{address} failover"] == ["no permission"], found
        for port in (6379, 26379):
            assert found[f"{address}:{port} plain"][0] == "connection", found
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
    argv = ["ansible-playbook", "site.yml", "-i", "inventory", *SECURE, "--check", "--diff"]
    changed_nothing(run(argv, 1800), NEW_HUBS)


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
from crawlfleet.hub.connect import get_redis
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
import json, ssl, urllib.request
base = "https://{lab.hosts[HUB]}"
context = ssl.create_default_context(cafile={CA_FILE!r})
print(json.dumps([urllib.request.urlopen(f"{{base}}:{{port}}/health", timeout=5,
                                         context=context).status for port in (5555, 6777)]))
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
