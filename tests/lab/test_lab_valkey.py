"""The hub on Valkey: a lab built with LAB_REDIS_FLAVOR=valkey (`make lab-valkey`; the inventory
turns it into redis_server_flavor=valkey for vagrant's provisioner and every later run) runs
Debian's valkey-server from bookworm-backports with the crawlfleet configuration and no
redis-server at all; the workers and the pools (the crawl's proxies and tokens) reach it through
REDIS_URL alone; the book crawl collects every book once, the hub's server restarted mid-crawl
loses nothing, and a second run of site.yml (--check --diff) changes nothing.

A fresh lab of its own (the session fixture: vagrant up provisions it on Valkey), about 10
minutes here (converge 5.5, tests 4): not part of make test."""

from __future__ import annotations

import pytest
from labchecks import assert_complete, in_flight
from labcrawl import LabCrawl
from labhosts import Lab, changed_nothing, run
from labroles import HUB, HUB_CLI, HUB_FLAVOR, HUB_SERVER, WORKER, host_python

pytestmark = [pytest.mark.lab, pytest.mark.valkey, pytest.mark.timeout(900)]

WORKERS = ("b", "c")


# On the hub as root: the operators' REDIS_URL (operator.env) - what the server says it is.
HUB_VIEW = """
import json, shlex
from crawlfleet.hub.connect import get_redis
env = dict(line.split("=", 1) for line in open("/etc/crawlfleet/operator.env").read().splitlines()
           if line and not line.startswith("#"))
client = get_redis(shlex.split(env["REDIS_URL"])[0], socket_timeout=5)
info = client.info("server")
config = {}
for key in ("maxmemory-policy", "appendonly", "dir"):
    config.update(client.config_get(key))
print(json.dumps({"server": info.get("server_name"), "version": info.get("valkey_version"),
                  "config": config}))
"""


@pytest.fixture(scope="module", autouse=True)
def valkey_flavor() -> None:
    assert HUB_FLAVOR == "valkey", (
        "LAB_REDIS_FLAVOR=valkey must be set for these tests (make lab-valkey)"
    )


def test_the_hub_runs_valkey_with_the_crawlfleet_configuration_and_no_redis(lab: Lab) -> None:
    assert lab.ssh(HUB, f"systemctl is-active {HUB_SERVER}").stdout.strip() == "active"
    absent = lab.ssh(HUB, "dpkg-query -W -f='${Status}' redis-server", check=False)
    assert "ok installed" not in absent.stdout, absent.stdout
    unit = lab.ssh(HUB, f"systemctl cat {HUB_SERVER}.service").stdout
    assert "ExecStart=/usr/bin/valkey-server /etc/valkey/crawlfleet.conf" in unit, unit
    user = lab.ssh(HUB, f"systemctl show -p User --value {HUB_SERVER}").stdout.strip()
    assert user == "valkey"
    # The health check of the role ran valkey-cli; the operators' URL sees the same server.
    seen = host_python(lab, HUB, HUB_VIEW)
    assert seen["server"] == "valkey" and str(seen["version"]).startswith("8."), seen
    assert seen["config"] == {
        "maxmemory-policy": "noeviction",
        "appendonly": "yes",
        "dir": "/var/lib/valkey",
    }, seen
    ping = lab.ssh(HUB, f"{HUB_CLI} -h 127.0.0.1 -p 6379 ping", check=False)
    assert "NOAUTH" in ping.stdout + ping.stderr, ping  # the password is required
    # The workers know only REDIS_URL: it reaches Valkey.
    code = """
import json, os
from crawlfleet.hub.connect import get_redis
info = get_redis(os.environ["REDIS_URL"], socket_timeout=5).info("server")
print(json.dumps({"server": info.get("server_name"), "version": info.get("valkey_version")}))
"""
    seen = host_python(lab, WORKER, code, worker_env=True)
    assert seen["server"] == "valkey" and str(seen["version"]).startswith("8."), seen


def test_the_book_crawl_on_valkey_collects_every_book_once(
    crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    crawl.crawl_playbook("start")
    view = crawl.wait_done(timeout=420)
    assert view["total"] == len(catalogue_ids)
    assert_complete(crawl, catalogue_ids)
    assert view["requeued"] == 0, view


def test_valkey_restarted_mid_crawl_loses_nothing(crawl: LabCrawl, catalogue_ids: set[str]) -> None:
    crawl.systemctl("start", WORKERS)
    before = crawl.wait_progress(0.3)
    crawl.ssh(HUB, f"sudo systemctl restart {HUB_SERVER}", timeout=120)
    crawl.wait_done(timeout=420)
    assert_complete(crawl, catalogue_ids, in_flight_bound=in_flight(before, *WORKERS))


def test_a_second_run_of_site_yml_changes_nothing(lab: Lab) -> None:
    proc = run(
        ["ansible-playbook", "site.yml", "-i", "inventory", "--check", "--diff"], timeout=900
    )
    changed_nothing(proc)
