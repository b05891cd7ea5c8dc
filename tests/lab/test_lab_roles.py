"""The roles on the lab: a converged cluster stays put (--check --diff changes nothing; the
second run is `make lab-up` in test_lab_hosts), Redis and the pools answer a worker only with
the password or the key, the hub's ports are closed to lab hosts outside `crawlers` while SSH
stays open, and every service (and Redis's data) comes back after `docker restart` of its host."""

from __future__ import annotations

import time
import uuid

import pytest
from labhosts import Lab, changed_nothing, run
from labroles import (
    HUB,
    OUTSIDER,
    SERVICES,
    WORKER,
    host_python,
    inactive_services,
    lab_secret,
    restart_container,
    tcp_probe,
)

pytestmark = pytest.mark.lab

HUB_PORTS = [6379, 5555, 6777]


def test_check_diff_on_the_converged_cluster_reports_no_change_and_no_error(lab: Lab) -> None:
    argv = ["ansible-playbook", "site.yml", "-i", "inventory", "--check", "--diff"]
    changed_nothing(run(argv, timeout=900))


def test_the_worker_environment_runs_the_book_spider(lab: Lab) -> None:
    # What crawler@book-N runs: scrapy in the release, with crawler.env, as the workers' account.
    command = (
        "sudo -u crawlfleet-crawler sh -c 'set -a; . /etc/crawlfleet/crawler.env;"
        " cd /var/lib/crawlfleet; exec /opt/crawlfleet/venv/bin/scrapy list'"
    )
    assert lab.ssh(WORKER, command).stdout.split() == ["book"]
    unit = lab.ssh(WORKER, "systemctl cat crawler@book-1.service").stdout
    assert "EnvironmentFile=/etc/crawlfleet/crawler.env" in unit


def test_redis_answers_a_worker_only_with_the_password(lab: Lab) -> None:
    code = """
import json, os
from urllib.parse import urlsplit
import redis
url = urlsplit(os.environ["REDIS_URL"])
result = {"host": url.hostname}
for name, password in (("none", None), ("wrong", "not-the-password"), ("right", url.password)):
    client = redis.Redis(host=url.hostname, port=url.port, password=password, socket_timeout=5)
    try:
        result[name] = "PONG" if client.ping() else "no"
    except redis.exceptions.ResponseError as exc:
        result[name] = str(exc).split()[0]
    except redis.exceptions.AuthenticationError as exc:
        result[name] = type(exc).__name__
print(json.dumps(result))
"""
    result = host_python(lab, WORKER, code, worker_env=True)
    assert result["host"] == lab.hosts[HUB]
    assert result["right"] == "PONG"
    assert result["none"] in ("NOAUTH", "AuthenticationError"), result
    assert result["wrong"] in ("WRONGPASS", "AuthenticationError"), result


def test_the_pools_answer_a_worker_only_with_the_key(lab: Lab) -> None:
    code = """
import json, os
import httpx
result = {}
for pool, path, key in (
    ("proxypool", "/count", os.environ["PROXYPOOL_API_KEY"]),
    ("accountpool", "/demosite/count", os.environ["ACCOUNTPOOL_API_KEY"]),
):
    url = os.environ[pool.upper() + "_URL"] + path
    for name, headers in (("none", {}), ("wrong", {"X-API-Key": "wrong-key-0123456789"}),
                          ("right", {"X-API-Key": key})):
        result[f"{pool}/{name}"] = httpx.get(url, headers=headers, timeout=10).status_code
print(json.dumps(result))
"""
    result = host_python(lab, WORKER, code, worker_env=True)
    assert result == {
        "proxypool/none": 401,
        "proxypool/wrong": 401,
        "proxypool/right": 200,
        "accountpool/none": 401,
        "accountpool/wrong": 401,
        "accountpool/right": 200,
    }
    assert lab_secret("vault_proxypool_api_key") not in str(result)


def test_the_hub_is_closed_to_lab_hosts_outside_crawlers_but_ssh(lab: Lab) -> None:
    hub = lab.hosts[HUB]
    from_outsider = tcp_probe(lab, OUTSIDER, hub, [22, *HUB_PORTS])
    assert from_outsider == {22: "open", 6379: "timeout", 5555: "timeout", 6777: "timeout"}
    # The same ports are open to a worker: the firewall, not a dead service, closed them.
    assert tcp_probe(lab, WORKER, hub, HUB_PORTS) == dict.fromkeys(HUB_PORTS, "open")
    ruleset = lab.ssh(HUB, "sudo nft list tables").stdout.split("\n")
    assert "table inet crawlfleet" in ruleset


def test_every_service_and_redis_data_come_back_after_docker_restart(lab: Lab) -> None:
    marker = uuid.uuid4().hex
    write = f"""
import json, os, time
import redis
client = redis.Redis.from_url(os.environ["REDIS_URL"])
client.set("crawlfleet:test:aof", {marker!r})
time.sleep(1.5)  # appendfsync everysec: on disk within a second
print(json.dumps(client.get("crawlfleet:test:aof").decode()))
"""
    assert host_python(lab, WORKER, write, worker_env=True) == marker
    for host in SERVICES:
        restart_container(lab, host)
    deadline = time.monotonic() + 90
    down = {host: inactive_services(lab, host) for host in SERVICES}
    while any(down.values()) and time.monotonic() < deadline:
        time.sleep(2)
        down = {host: inactive_services(lab, host) for host in SERVICES}
    assert not any(down.values()), down
    for host in SERVICES:
        failed = lab.ssh(host, "systemctl --failed --no-legend --plain").stdout.strip()
        assert failed == "", (host, failed)
    read = """
import json, os
import redis
client = redis.Redis.from_url(os.environ["REDIS_URL"])
value = client.get("crawlfleet:test:aof")
client.delete("crawlfleet:test:aof")
print(json.dumps(value.decode() if value else None))
"""
    assert host_python(lab, WORKER, read, worker_env=True) == marker
    # The firewall table is loaded again at boot.
    assert tcp_probe(lab, OUTSIDER, lab.hosts[HUB], [6379]) == {6379: "timeout"}
