"""Least privilege on the lab's hosts: every service runs as its own system account, each
environment file is readable by root and its own service only (the internet-facing proxy pool
and the dashboard cannot read the account pool's secret key), the shared release is readable by
every account and writable by none, and a host still in the shared-account layout of earlier
releases converges to this one."""

from __future__ import annotations

import shlex

import pytest
from labhosts import Lab, changed_tasks, recap, run
from labroles import HUB, OUTSIDER, WORKER, host_python

pytestmark = pytest.mark.lab

CONFIG = "/etc/crawlfleet"
RELEASE = "/opt/crawlfleet"
WORKDIR = "/var/lib/crawlfleet"
# host -> unit -> (account, its environment file).
ACCOUNTS = {
    HUB: {
        "crawlfleet-proxypool": ("crawlfleet-proxypool", "proxypool.env"),
        "crawlfleet-accountpool": ("crawlfleet-accountpool", "accountpool.env"),
        "crawlfleet-dashboard": ("crawlfleet-dashboard", "dashboard.env"),
        "crawlfleet-scheduler": ("crawlfleet-scheduler", "scheduler.env"),
    },
    WORKER: {"crawler@book-1": ("crawlfleet-crawler", "crawler.env")},
    OUTSIDER: {"crawlfleet-demosite": ("crawlfleet-demosite", "demosite.env")},
}
# The hub services and their /health, from the hub itself.
HEALTH = {
    "crawlfleet-proxypool": 5555,
    "crawlfleet-accountpool": 6777,
    "crawlfleet-dashboard": 8060,
}
# The account of the shared layout of earlier releases.
LEGACY = "crawlfleet"


def as_user(lab: Lab, host: str, user: str, command: str) -> str:
    """`command` as `user` on `host`: 'ok', or the last line of what it wrote to stderr."""
    inner = f"sudo -n -u {user} sh -c {shlex.quote(command)} 2>&1 >/dev/null"
    proc = lab.ssh(host, f"{inner} && echo ok || true")
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "failed silently"


def converge(*extra: str) -> str:
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", *extra], timeout=900)
    counts = recap(proc.stdout)
    assert counts and all(c["failed"] == 0 for c in counts.values()), proc.stdout[-3000:]
    return proc.stdout


def test_every_service_runs_as_its_own_account(lab: Lab) -> None:
    seen = []
    for host, units in ACCOUNTS.items():
        for unit, (account, _) in units.items():
            shown = lab.ssh(host, f"systemctl show -p User -p Group {unit}").stdout.split()
            assert sorted(shown) == [f"Group={account}", f"User={account}"], (host, unit, shown)
            entry = lab.ssh(host, f"getent passwd {account}").stdout.strip().split(":")
            home = WORKDIR if account == "crawlfleet-crawler" else "/nonexistent"
            assert entry[5:] == [home, "/usr/sbin/nologin"], entry
            seen.append(account)
    assert len(set(seen)) == len(seen), seen
    # The running processes, not only the units, carry the accounts.
    for unit, (account, _) in ACCOUNTS[HUB].items():
        pid = lab.ssh(HUB, f"systemctl show -p MainPID --value {unit}").stdout.strip()
        assert pid != "0", unit
        assert lab.ssh(HUB, f"ps -o user= -p {pid}").stdout.strip() == account, unit


def test_each_environment_file_is_readable_by_its_own_service_only(lab: Lab) -> None:
    for host, units in ACCOUNTS.items():
        accounts = [account for account, _ in units.values()]
        for account, env in units.values():
            path = f"{CONFIG}/{env}"
            assert lab.ssh(host, f"sudo stat -c '%U:%G %a' {path}").stdout.strip() == (
                f"root:{account} 640"
            ), (host, path)
            for reader in [*accounts, "nobody"]:
                answer = as_user(lab, host, reader, f"cat {path}")
                if reader == account:
                    assert answer == "ok", (host, reader, path, answer)
                else:
                    assert answer.endswith("Permission denied"), (host, reader, path, answer)
    # The case: the internet-facing services cannot read the account pool's secret key.
    for reader in ("crawlfleet-proxypool", "crawlfleet-dashboard"):
        answer = as_user(
            lab, HUB, reader, f"grep -c ACCOUNTPOOL_SECRET_KEY {CONFIG}/accountpool.env"
        )
        assert answer.endswith("Permission denied"), (reader, answer)


def test_the_release_is_readable_by_every_account_and_writable_by_none(lab: Lab) -> None:
    for host, units in ACCOUNTS.items():
        loose = lab.ssh(
            host,
            f"sudo find {RELEASE}/ -xdev ! -type l"
            " \\( ! -user root -o ! -group root -o -perm /022 \\) -print -quit",
        ).stdout.strip()
        assert loose == "", (host, loose)
        for account, _ in units.values():
            check = f"{RELEASE}/venv/bin/python -c 'import crawlfleet'"
            assert as_user(lab, host, account, check) == "ok", (host, account)
            probe = f"touch {RELEASE}/venv/lib/probe"
            assert as_user(lab, host, account, probe).endswith("Permission denied"), host


def test_the_workers_write_only_their_own_directory(lab: Lab) -> None:
    stat = lab.ssh(WORKER, f"sudo stat -c '%U:%G %a' {WORKDIR}").stdout.strip()
    assert stat == "crawlfleet-crawler:crawlfleet-crawler 750"
    probe = f"touch {WORKDIR}/.probe && rm {WORKDIR}/.probe"
    assert as_user(lab, WORKER, "crawlfleet-crawler", probe) == "ok"
    assert as_user(lab, WORKER, "crawlfleet-crawler", f"touch {CONFIG}/probe").endswith(
        "Permission denied"
    )


def test_the_services_are_healthy_under_their_accounts(lab: Lab) -> None:
    code = f"""
import json, urllib.request
print(json.dumps({{
    unit: urllib.request.urlopen("http://{lab.hosts[HUB]}:%d/health" % port, timeout=10).status
    for unit, port in {HEALTH!r}.items()
}}))
"""
    assert host_python(lab, HUB, code) == dict.fromkeys(HEALTH, 200)
    for host, units in ACCOUNTS.items():
        for unit in units:
            if unit.startswith("crawler@"):
                continue  # the workers run only while a crawl does (crawl.yml starts them)
            assert lab.ssh(host, f"systemctl is-active {unit}").stdout.strip() == "active", unit


def test_a_host_in_the_shared_account_layout_converges(lab: Lab) -> None:
    """The proxy pool as earlier releases left it (unit, environment file and process of the
    shared account) is moved to its own account by one run and the next changes nothing."""
    created = lab.ssh(HUB, f"getent passwd {LEGACY}", check=False).returncode != 0
    if created:
        lab.ssh(HUB, f"sudo useradd --system --user-group --no-create-home {LEGACY}")
    try:
        unit = "/etc/systemd/system/crawlfleet-proxypool.service"
        lab.ssh(
            HUB,
            f"sudo sed -i 's/^User=.*/User={LEGACY}/; s/^Group=.*/Group={LEGACY}/' {unit}"
            f" && sudo chgrp {LEGACY} {CONFIG}/proxypool.env"
            " && sudo systemctl daemon-reload && sudo systemctl restart crawlfleet-proxypool",
        )
        pid = lab.ssh(HUB, "systemctl show -p MainPID --value crawlfleet-proxypool").stdout.strip()
        assert lab.ssh(HUB, f"ps -o user= -p {pid}").stdout.strip() == LEGACY
        assert as_user(lab, HUB, LEGACY, f"cat {CONFIG}/proxypool.env") == "ok"

        first = converge("--tags", "proxypool", "--limit", HUB)
        assert {
            f"{HUB}: crawlfleet_service : Write the environment of proxypool",
            f"{HUB}: crawlfleet_service : Install the unit of proxypool",
            f"{HUB}: crawlfleet_service : Restart proxypool",
        } <= set(changed_tasks(first)), changed_tasks(first)
        # Only a new release (project/ changed between the two runs) may change the second one.
        second = converge("--tags", "proxypool", "--limit", HUB)
        release = ("crawlfleet_app : ", "Record the release of proxypool", "Restart proxypool")
        left = [task for task in changed_tasks(second) if not any(r in task for r in release)]
        assert left == [], changed_tasks(second)

        pid = lab.ssh(HUB, "systemctl show -p MainPID --value crawlfleet-proxypool").stdout.strip()
        assert lab.ssh(HUB, f"ps -o user= -p {pid}").stdout.strip() == "crawlfleet-proxypool"
        answer = as_user(lab, HUB, LEGACY, f"cat {CONFIG}/proxypool.env")
        assert answer.endswith("Permission denied"), answer
        health = f"""
import json, urllib.request
print(json.dumps(urllib.request.urlopen("http://{lab.hosts[HUB]}:5555/health", timeout=10).status))
"""
        assert host_python(lab, HUB, health) == 200
    finally:
        if created:
            lab.ssh(HUB, f"sudo userdel {LEGACY}", check=False)
