"""The hub's wire and its Redis users on the lab: site.yml with crawlfleet_tls_enabled and
crawlfleet_redis_acl_enabled converges and a second run changes nothing; from worker b a plain-text
Redis client and plain HTTP to the pools are refused while rediss:// and https:// with the fleet's
CA work (and fail without it); the crawler's Redis user cannot read the account pool's keys and
the dashboard's cannot write; the book crawl, started as a job through the agents, collects every
book once through TLS and ACLs; a
short ACL password stops site.yml in its first play. Converging back with the inventory's
defaults puts the lab back (plain Redis with the password).

Runs on the running lab: three converges of the whole lab and one crawl, about 9 minutes."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest
from labchecks import assert_complete, job_ended, start_book_job
from labcrawl import LabCrawl, per_host
from labhosts import Lab, changed_tasks, recap, run
from labroles import HUB, HUB_CLI, WORKER, host_python, lab_secret

# about 8.5 minutes (three converges and a crawl): `make lab-security`, not part of make test
pytestmark = [pytest.mark.lab, pytest.mark.security, pytest.mark.timeout(2400)]

SECURE = {"crawlfleet_tls_enabled": True, "crawlfleet_redis_acl_enabled": True}
CA_FILE = "/etc/crawlfleet/tls/ca.crt"


def converge(extra: dict[str, bool] | None) -> tuple[dict[str, dict[str, int]], list[str]]:
    """site.yml on the whole lab with `extra` vars (None: the inventory's); fails on any error."""
    args = ["-e", json.dumps(extra)] if extra else []
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", *args], timeout=1200)
    counts = recap(proc.stdout)
    assert counts, proc.stdout[-3000:]
    for host, count in counts.items():
        assert (count["failed"], count["unreachable"]) == (0, 0), (host, count)
    return counts, changed_tasks(proc.stdout)


@pytest.fixture(scope="module")
def secure_lab(lab: Lab) -> Iterator[Lab]:
    """The lab converged with TLS and ACL users, converged back afterwards whatever happened."""
    start = time.monotonic()
    try:
        converge(SECURE)
        lab.timings["secure_converge_s"] = time.monotonic() - start
        yield lab
    finally:
        start = time.monotonic()
        converge(None)
        lab.timings["secure_converge_back_s"] = time.monotonic() - start
        back = host_python(lab, WORKER, PLAIN_BACK, worker_env=True)
        assert back == {"scheme": "redis", "user": "", "ping": True}, back


PLAIN_BACK = """
import json, os
from urllib.parse import urlsplit
from crawlfleet.hub.connect import get_redis
url = os.environ["REDIS_URL"]
print(json.dumps({"scheme": urlsplit(url).scheme, "user": urlsplit(url).username or "",
                  "ping": get_redis(url, socket_timeout=5).ping()}))
"""

PROBE = """
import json, os, ssl
from urllib.parse import urlsplit
import httpx
import redis
from crawlfleet.hub.connect import get_redis

url = os.environ["REDIS_URL"]
parts = urlsplit(url)
hub, port = parts.hostname, parts.port
pools = {"proxypool": os.environ["PROXYPOOL_URL"], "accountpool": os.environ["ACCOUNTPOOL_URL"]}
result = {"scheme": parts.scheme, "user": parts.username,
          "ca": os.environ.get("CRAWLFLEET_CA_FILE"), "pools": list(pools.values())}


def attempt(call):
    try:
        return ["ok", call()]
    except redis.exceptions.NoPermissionError as exc:
        return ["no permission", str(exc)[:120]]
    except redis.exceptions.ConnectionError as exc:
        return ["connection", type(exc).__name__]
    except (redis.exceptions.RedisError, OSError, httpx.HTTPError) as exc:
        return [type(exc).__name__, str(exc)[:120]]


# A plain-text client with the right user and password, at the hub's private address.
plain = redis.Redis(host=hub, port=port, username="crawler", password=parts.password,
                    socket_timeout=5, socket_connect_timeout=5)
result["plain"] = attempt(plain.ping)
# rediss:// with the fleet's CA (the worker's own URL), and without it (the system's CAs).
client = get_redis(url, socket_timeout=5)
result["tls"] = attempt(client.ping)
no_ca = get_redis(url.split("?")[0], socket_timeout=5)
result["tls_without_ca"] = attempt(no_ca.ping)
# The crawler's user: its own keys yes, the account pool's keys no.
result["crawler_own"] = attempt(lambda: client.set("book:security-probe", "1", ex=60))
result["crawler_accounts"] = attempt(lambda: client.type("accounts:demosite"))
result["crawler_credentials"] = attempt(lambda: client.get("credentials:demosite:alice"))
# The dashboard's user (from b, for the test): reads the crawl, writes nothing.
dash_url = url.replace("//crawler:" + parts.password + "@", "//dashboard:" + DASHBOARD + "@")
dash = get_redis(dash_url, socket_timeout=5)
result["dashboard_read"] = attempt(lambda: dash.get("book:security-probe").decode())
result["dashboard_write"] = attempt(lambda: dash.set("book:security-probe", "2"))
result["dashboard_delete"] = attempt(lambda: dash.delete("book:security-probe"))
result["dashboard_accounts"] = attempt(lambda: dash.type("accounts:demosite"))
client.delete("book:security-probe")
# The pools: https:// with the CA answers, plain http:// and https:// without the CA do not.
context = ssl.create_default_context(cafile=os.environ["CRAWLFLEET_CA_FILE"])


def health(base, verify=True):
    return httpx.get(base + "/health", verify=verify, timeout=5, trust_env=False).status_code


for name, base in pools.items():
    result[name + "_https"] = attempt(lambda: health(base, context))
    result[name + "_http"] = attempt(lambda: health(base.replace("https://", "http://")))
    result[name + "_no_ca"] = attempt(lambda: health(base))
print(json.dumps(result))
"""


def test_a_second_run_with_tls_and_acls_changes_nothing(secure_lab: Lab) -> None:
    lab = secure_lab
    start = time.monotonic()
    counts, changed = converge(SECURE)
    lab.timings["secure_rerun_s"] = time.monotonic() - start
    assert set(counts) == set(lab.hosts)
    assert {host: count["changed"] for host, count in counts.items()} == dict.fromkeys(counts, 0), (
        changed
    )


def test_the_hub_speaks_only_tls_and_each_user_only_its_part(secure_lab: Lab) -> None:
    lab = secure_lab
    code = f"DASHBOARD = {lab_secret('vault_redis_dashboard_password')!r}\n{PROBE}"
    result = host_python(lab, WORKER, code, worker_env=True)
    hub = lab.hosts[HUB]
    assert (result["scheme"], result["user"], result["ca"]) == ("rediss", "crawler", CA_FILE)
    assert result["pools"] == [f"https://{hub}:5555", f"https://{hub}:6777"], result
    assert result["plain"][0] == "connection", result
    assert result["tls"] == ["ok", True], result
    assert result["tls_without_ca"][0] == "connection", result
    assert result["crawler_own"] == ["ok", True], result
    assert result["crawler_accounts"][0] == "no permission", result
    assert result["crawler_credentials"][0] == "no permission", result
    assert result["dashboard_read"] == ["ok", "1"], result
    for refused in ("dashboard_write", "dashboard_delete", "dashboard_accounts"):
        assert result[refused][0] == "no permission", (refused, result)
    for pool in ("proxypool", "accountpool"):
        assert result[f"{pool}_https"] == ["ok", 200], result
        assert result[f"{pool}_http"][0] != "ok", result
        assert result[f"{pool}_no_ca"][0] == "ConnectError", result
    # Plain connections remain only on the hub itself, through the unix socket.
    listening = lab.ssh(HUB, "sudo ss -Hltn 'sport = :6379'").stdout.split()
    addresses = sorted(a for a in listening if a.endswith(":6379"))
    assert addresses == ["127.0.0.1:6379", f"{hub}:6379"], listening  # both TLS
    refused = lab.ssh(HUB, f"{HUB_CLI} -h 127.0.0.1 -p 6379 ping", check=False)
    assert "PONG" not in refused.stdout, refused.stdout
    # Every secret stays out of what the probe printed.
    assert lab_secret("vault_redis_crawler_password") not in str(result)


def test_the_book_crawl_through_tls_and_acls_collects_every_book_once(
    secure_lab: Lab, catalogue_ids: set[str]
) -> None:
    crawl = LabCrawl()
    crawl.reset()
    try:
        # Started as a job: the operator's user on the hub, each worker's agent with the
        # crawler's, the scheduler's watchdog with the operator's, all over TLS.
        job = start_book_job(secure_lab)
        view = crawl.wait_done(timeout=420)
        assert job_ended(secure_lab, job)["state"] == "finished"
        assert view["total"] == len(catalogue_ids)
        assert_complete(crawl, catalogue_ids)
        scrapy = [row["scrapy"] for row in view["workers"]]
        pages = sum(entry["pages"] for entry in per_host(view).values())
        # The pools answered over HTTPS: requests went through proxies and carried tokens.
        assert sum(s.get("proxy/assigned", 0) for s in scrapy) >= pages > 0
        assert sum(s.get("auth/assigned", 0) for s in scrapy) >= pages
        assert {name: entry["error"] for name, entry in view["pools"].items()} == {
            "proxypool": None,
            "accountpool": None,
        }, view["pools"]
    finally:
        crawl.reset()


def test_a_short_acl_password_stops_site_yml_in_its_first_play(lab: Lab) -> None:
    extra = {"crawlfleet_redis_acl_enabled": True, "redis_crawler_password": "too-short"}
    proc = run(
        ["ansible-playbook", "site.yml", "-i", "inventory", "-e", json.dumps(extra)],
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    assert "inventory variable 'redis_crawler_password' of host b is shorter than 16" in (
        proc.stdout.replace("''", "'")
    ), proc.stdout[-3000:]
    assert re.findall(r"^PLAY \[(.*)\]", proc.stdout, re.MULTILINE) == ["Check the inventory"]
    assert all(count["changed"] == 0 for count in recap(proc.stdout).values())
