"""Bad input to the lab and the playbooks: a wrong inventory stops site.yml in its first play with
a message naming the variable, before any host is touched; lab.sh refuses what it cannot do."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from labhosts import ROOT, Lab, lab_hosts, recap, run

pytestmark = pytest.mark.lab

MAIN = "group_vars/all/main.yml"
VAULT = "group_vars/all/vault.yml"
HOSTS = "hosts.yml"


@pytest.mark.parametrize(
    ("path", "old", "new", "named"),
    [
        (
            MAIN,
            'crawlfleet_private_address: "{{ ansible_host }}"\n',
            "",
            "'crawlfleet_private_address'",
        ),
        (
            MAIN,
            'crawlfleet_private_address: "{{ ansible_host }}"',
            "crawlfleet_private_address: hub",
            "'crawlfleet_private_address'",
        ),
        (MAIN, 'redis_password: "{{ vault_redis_password }}"\n', "", "'redis_password'"),
        (
            VAULT,
            "vault_proxypool_api_key: lab-only-proxypool-key-not-secret",
            "vault_proxypool_api_key: CHANGE-ME",
            "'proxypool_api_key'",
        ),
        (
            HOSTS,
            "    crawlers:\n      hosts:\n        b:\n        c:\n",
            "    crawlers:\n      hosts: {}\n",
            "inventory group 'crawlers'",
        ),
        (
            "group_vars/redis.yml",
            "redis_server_flavor: \"{{ lookup('ansible.builtin.env', 'LAB_REDIS_FLAVOR')"
            " or __redis_server_flavor | default('redis') }}\"",
            "redis_server_flavor: redict",
            "inventory variable 'redis_server_flavor' of host a is 'redict';"
            " it must be redis or valkey",
        ),
        (
            HOSTS,
            "    redis:\n      hosts:\n        a:\n",
            "    redis:\n      hosts:\n        a:\n        b:\n",
            "inventory group 'redis' has 2 host(s) (crawlfleet_redis_sentinel false): it needs one",
        ),
        (
            HOSTS,
            "    redis_cluster:\n      hosts: {}\n",
            "    redis_cluster:\n      hosts:\n        b:\n        c:\n",
            "inventory group 'redis_cluster' has 2 host(s), it needs 3 or more",
        ),
        (
            HOSTS,
            "    redis_cluster:\n      hosts: {}\n",
            "    redis_cluster:\n      hosts:\n        a:\n        b:\n        c:\n",
            "host(s) a are in both inventory groups 'redis' and 'redis_cluster'",
        ),
        (
            HOSTS,
            "    redis_cluster:\n      hosts: {}\n",
            "    redis_cluster:\n      hosts:\n        b:\n        c:\n        web:\n",
            "crawlfleet_jobs_enabled must be false with the inventory group 'redis_cluster'",
        ),
    ],
    ids=[
        "missing-private-address",
        "bad-private-address",
        "missing-secret",
        "placeholder-secret",
        "no-crawlers",
        "unknown-server-flavor",
        "two-redis-hosts",
        "two-cluster-hosts",
        "a-host-in-redis-and-redis-cluster",
        "jobs-beside-a-cluster",
    ],
)
def test_a_wrong_inventory_stops_site_yml_in_its_first_play(
    tmp_path: Path, path: str, old: str, new: str, named: str
) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(ROOT / "inventory", inventory)
    edited = inventory / path
    text = edited.read_text()
    assert old in text
    edited.write_text(text.replace(old, new))

    proc = run(["ansible-playbook", "site.yml", "-i", str(inventory)], timeout=300, check=False)

    assert proc.returncode != 0
    assert named in proc.stdout, proc.stdout[-3000:]
    assert re.findall(r"^PLAY \[(.*)\]", proc.stdout, re.MULTILINE) == ["Check the inventory"]
    assert all(count["changed"] == 0 for count in recap(proc.stdout).values())


def test_a_host_on_an_unsupported_release_stops_site_yml_before_any_change(lab: Lab) -> None:
    # The lab's hosts run Debian 12: with only Debian 13 supported, each is refused in one line.
    only_13 = json.dumps({"crawlfleet_supported_releases": {"Debian": ["13"]}})
    proc = run(["ansible-playbook", "site.yml", "-i", "inventory", "-e", only_13], check=False)
    assert proc.returncode != 0
    refused = re.findall(
        r"host (\w+) runs Debian 12\.\d+; crawlfleet supports Debian 13", proc.stdout
    )
    assert sorted(set(refused)) == sorted(lab_hosts()), proc.stdout[-3000:]
    assert re.findall(r"^PLAY \[(.*)\]", proc.stdout, re.MULTILINE) == ["Check the inventory"]
    assert all(count["changed"] == 0 for count in recap(proc.stdout).values())


def test_the_example_inventory_asks_for_its_secrets_first() -> None:
    # Its vault holds CHANGE-ME placeholders: the check stops the run before any host is contacted.
    proc = run(["ansible-playbook", "site.yml", "-i", "ansible/inventory.example"], check=False)
    assert proc.returncode != 0
    assert "'redis_password' is missing, empty or still CHANGE-ME" in proc.stdout, proc.stdout
    assert "UNREACHABLE" not in proc.stdout


def test_lab_sh_says_what_it_needs() -> None:
    proc = run(["scripts/lab.sh", "sideways"], check=False)
    assert proc.returncode == 2 and "usage:" in proc.stderr
    unprivileged = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    for script in ("scripts/lab.sh status", "scripts/dockerd.sh"):
        proc = run([*unprivileged, *script.split()], check=False)
        assert proc.returncode == 1, proc
        assert "needs root" in proc.stderr


@pytest.mark.parametrize(
    ("releases", "vagrant_says", "image_says"),
    [
        ("a", "LAB_RELEASES entry 'a' is not host=release", "LAB_RELEASES entry 'a' is not"),
        ("x=trixie", "LAB_RELEASES names 'x', which is not a lab host", None),
        ("a=sid", "LAB_RELEASES gives a release 'sid'", "no lab image for release 'sid'"),
    ],
)
def test_a_wrong_lab_releases_stops_the_lab_in_one_line(
    releases: str, vagrant_says: str, image_says: str | None
) -> None:
    # The Vagrantfile refuses it before any machine is looked at; lab-image.sh before dockerd.
    proc = run(["env", f"LAB_RELEASES={releases}", "vagrant", "status"], check=False)
    assert proc.returncode != 0 and vagrant_says in proc.stderr, proc
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if image_says:
        proc = run(["env", f"LAB_RELEASES={releases}", "scripts/lab-image.sh"], check=False)
        assert proc.returncode == 1 and image_says in proc.stderr, proc
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
