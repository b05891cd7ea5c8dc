"""A mixed fleet, as teams run one now: the hub (a) and worker c on Debian 13 "trixie", worker b
(and the lab-only web and proxy) on Debian 12 "bookworm", the hub on Valkey. `make lab-mixed`
builds it fresh (LAB_RELEASES=a=trixie,c=trixie gives those hosts the trixie image, the
Vagrantfile and scripts/lab-image.sh read it; LAB_REDIS_FLAVOR=valkey as for `make lab-valkey`)
and vagrant's provisioner converges it in one site.yml run.

Each host runs the release it was given and Debian's Python of it (3.13 on 13, 3.11.2 on 12), and
installs the crawlfleet release of the wheelhouse built for that Python (role crawlfleet_app: the
control node's own for 3.11.2, one cross-downloaded for 3.13); the crawl units on c run under
Python 3.13. The hub on Valkey 8.1 from trixie's main (no backports), the book crawl with every
book once, either worker killed mid-crawl (the other, on the other release, finishes), and a
second run of site.yml (--check --diff) changes nothing. The checks shared with the Valkey lab
and the crawl drills are theirs (test_lab_valkey, labchecks.assert_survives_worker_kill).

A fresh lab of its own (docs/testing.md, "Mixed releases in the lab"), not part of make test."""

from __future__ import annotations

import json
import os
import shlex

import pytest
import test_lab_valkey
from labchecks import assert_complete, assert_survives_worker_kill
from labcrawl import LabCrawl, per_host
from labhosts import Lab, lab_hosts
from labroles import HUB, HUB_FLAVOR

pytestmark = [pytest.mark.lab, pytest.mark.mixed, pytest.mark.timeout(900)]

MIXED = "a=trixie,c=trixie"
# Debian's release number and its python3 (major.minor) of each release the lab's images carry.
RELEASES = {"bookworm": ("12", "3.11"), "trixie": ("13", "3.13")}
# What the hosts must run: trixie where LAB_RELEASES says so, bookworm everywhere else.
GIVEN = dict(entry.split("=", 1) for entry in MIXED.split(","))
WORKERS = ("b", "c")
CRAWLFLEET = "/opt/crawlfleet"

# On a host as root, with Debian's python3: its version, the virtualenv's Python, the crawlfleet
# release the host runs (the venv link), the checksum of the wheelhouse it installed and the
# CPython tags of the wheels in it.
HOST_VIEW = """
import hashlib, json, os, platform, re, subprocess, tarfile
root, venv = "/opt/crawlfleet", "/opt/crawlfleet/venv/bin/python"
version = "import platform; print(platform.python_version())"
with open(root + "/wheelhouse.tar", "rb") as f:
    sha = hashlib.sha256(f.read()).hexdigest()
with tarfile.open(root + "/wheelhouse.tar") as tar:
    tags = {m.group(1) for n in tar.getnames() if (m := re.search(r"-(cp3[0-9]+)-cp3[0-9]+", n))}
print(json.dumps({
    "python": platform.python_version(),
    "venv_python": subprocess.run([venv, "-c", version], capture_output=True, text=True,
                                  check=True).stdout.strip(),
    "release": os.path.basename(os.readlink(root + "/venv")),
    "wheelhouse_sha": sha,
    "cp_tags": sorted(tags),
}))
"""


def expected_release(host: str) -> str:
    return GIVEN.get(host, "bookworm")


def host_view(lab: Lab, host: str) -> dict[str, object]:
    # Debian's python3, not the venv's (labroles.host_python runs the venv's on crawlfleet hosts).
    out = lab.ssh(host, f"sudo python3 -c {shlex.quote(HOST_VIEW)}").stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


@pytest.fixture(scope="module", autouse=True)
def mixed_lab() -> None:
    assert os.environ.get("LAB_RELEASES") == MIXED and HUB_FLAVOR == "valkey", (
        f"LAB_RELEASES={MIXED} and LAB_REDIS_FLAVOR=valkey must be set (make lab-mixed)"
    )


def test_each_host_runs_its_release_and_its_python_and_booted_cleanly(lab: Lab) -> None:
    assert set(GIVEN) <= set(lab_hosts())
    for host in lab_hosts():
        version_id, python = RELEASES[expected_release(host)]
        release = lab.ssh(host, ". /etc/os-release; echo $VERSION_ID $VERSION_CODENAME").stdout
        assert release.split() == [version_id, expected_release(host)], (host, release)
        seen = lab.ssh(host, "python3 -c 'import platform; print(platform.python_version())'")
        assert seen.stdout.strip().startswith(python + "."), (host, seen.stdout)
        state = lab.ssh(host, "systemctl is-system-running", check=False).stdout.strip()
        failed = lab.ssh(host, "systemctl --failed --no-legend", check=False).stdout
        assert state == "running", (host, state, failed)


def test_each_crawlfleet_host_runs_the_release_built_for_its_python(lab: Lab) -> None:
    views = {host: host_view(lab, host) for host in (HUB, *WORKERS)}
    for host, view in views.items():
        _, python = RELEASES[expected_release(host)]
        tag = "cp" + python.replace(".", "")
        # The virtualenv runs Debian's Python of the host; the wheelhouse it came from holds
        # binary wheels of that Python only, and the release is named after that wheelhouse.
        assert view["venv_python"] == view["python"], (host, view)
        assert view["cp_tags"] == [tag], (host, view)
        assert view["release"] == str(view["wheelhouse_sha"])[:16], (host, view)
    # One wheelhouse per Python: the two Debian 13 hosts share theirs, b has its own.
    assert views[HUB]["release"] == views["c"]["release"] != views["b"]["release"], views


def test_the_hub_on_debian_13_runs_valkey_from_main(lab: Lab) -> None:
    test_lab_valkey.test_the_hub_runs_valkey_with_the_crawlfleet_configuration_and_no_redis(lab)
    version = lab.ssh(HUB, "valkey-server --version").stdout
    assert " v=8.1." in version, version
    # Debian 13 has Valkey in main: the role adds no backports suite there.
    sources = lab.ssh(HUB, "ls /etc/apt/sources.list.d/").stdout.split()
    assert not [name for name in sources if "backports" in name], sources


def test_the_book_crawl_collects_every_book_once_on_both_releases(
    lab: Lab, crawl: LabCrawl, catalogue_ids: set[str]
) -> None:
    # The Valkey lab's crawl, here shared by b (Debian 12) and c (Debian 13).
    crawl.crawl_playbook("start")
    crawl.wait_progress(0.1)
    # c's crawl processes run Debian 13's Python 3.13, from c's crawlfleet release.
    release = host_view(lab, "c")["release"]
    units = crawl.running_units(["c"]).get("c")
    assert units, "no crawl unit runs on c"
    for unit in units:
        pid = crawl.ssh("c", f"systemctl show -p MainPID --value {unit}").stdout.strip()
        # As the unit's own user: root has no CAP_SYS_PTRACE in the container to read it.
        user = crawl.ssh("c", f"systemctl show -p User --value {unit}").stdout.strip()
        exe = crawl.ssh("c", f"sudo -u {user} readlink -f /proc/{pid}/exe").stdout.strip()
        cmdline = crawl.ssh("c", f"sudo tr '\\0' ' ' </proc/{pid}/cmdline").stdout
        assert exe == "/usr/bin/python3.13", (unit, exe, cmdline)
        assert f"{CRAWLFLEET}/releases/{release}/bin/" in cmdline, (unit, release, cmdline)
    view = crawl.wait_done(timeout=420)
    assert view["total"] == len(catalogue_ids)
    assert_complete(crawl, catalogue_ids)
    assert view["requeued"] == 0, view
    shares = per_host(view)
    assert set(shares) == set(WORKERS), shares
    assert all(entry["pages"] > 0 for entry in shares.values()), shares


@pytest.mark.parametrize(("victim", "survivor"), [("b", "c"), ("c", "b")])
def test_a_worker_killed_mid_crawl_the_other_release_finishes(
    lab: Lab, crawl: LabCrawl, catalogue_ids: set[str], victim: str, survivor: str
) -> None:
    assert_survives_worker_kill(lab, crawl, catalogue_ids, victim=victim, survivor=survivor)


def test_a_second_run_of_site_yml_changes_nothing(lab: Lab) -> None:
    test_lab_valkey.test_a_second_run_of_site_yml_changes_nothing(lab)
