"""Helpers of the lab tier: run commands from the repository root, reach the lab's hosts over SSH,
read the inventory and ansible-playbook recaps, find what a destroyed lab left behind."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# scripts/labcrawl.py (on the path through pytest.ini's pythonpath) drives crawls for
# `make demo`, these tests and the lab benchmark; its run() is the one way lab commands run.
from labcrawl import run

ROOT = Path(__file__).resolve().parents[2]
LAB_NETWORK = ipaddress.ip_network("172.30.0.0/24")
KEY = ROOT / ".lab/ssh/vagrant_insecure_key"
TIMINGS = ROOT / ".lab/lab-times.json"
RECAP_LINE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>ok=.*)$")


def recap(output: str) -> dict[str, dict[str, int]]:
    """The last PLAY RECAP of ansible-playbook output: host -> {ok, changed, failed, ...}."""
    counts: dict[str, dict[str, int]] = {}
    in_recap = False
    for line in output.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap, counts = True, {}
        elif in_recap and (match := RECAP_LINE.match(line)):
            pairs = (item.split("=") for item in match["counts"].split())
            counts[match["host"]] = {key: int(value) for key, value in pairs}
        elif in_recap and line.strip():
            in_recap = False
    return counts


def changed_tasks(output: str) -> list[str]:
    """`host: task` for every task that reported changed in ansible-playbook output."""
    found, task = [], ""
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line.split("[", 1)[1].rsplit("]", 1)[0]
        elif line.startswith("changed: ["):
            found.append(f"{line.split('[', 1)[1].split(']', 1)[0]}: {task}")
    return found


def changed_nothing(
    proc: subprocess.CompletedProcess[str], hosts: Iterable[str] = ()
) -> dict[str, dict[str, int]]:
    """Assert that an ansible-playbook run reached ``hosts`` (at least one host, when none are
    named) and changed, failed and missed nothing on any; its recap. A failure names the host,
    its counts and the tasks that changed."""
    counts = recap(proc.stdout)
    assert counts and set(hosts) <= set(counts), proc.stdout[-3000:]
    changed = changed_tasks(proc.stdout)
    for host, count in counts.items():
        assert (count["changed"], count["failed"], count["unreachable"]) == (0, 0, 0), (
            host,
            count,
            changed,
        )
    return counts


@dataclass
class Lab:
    """The lab's hosts (name -> fixed address) and how long bringing it up took."""

    hosts: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def ssh(
        self, host: str, command: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return run(
            [
                "ssh",
                "-i",
                str(KEY),
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                f"vagrant@{self.hosts[host]}",
                command,
            ],
            timeout=timeout,
            check=check,
        )

    def containers(self) -> list[str]:
        out = run(
            ["docker", "ps", "-aq", "--no-trunc", "--filter", f"label=crawlfleet.lab={ROOT}"]
        ).stdout
        return sorted(out.split())


def lab_hosts() -> dict[str, str]:
    """The inventory's hosts on the lab network, the same rule the Vagrantfile uses."""
    inventory = yaml.safe_load((ROOT / "inventory/hosts.yml").read_text())
    found: dict[str, str] = {}

    def walk(group: dict[str, Any]) -> None:
        for name, hostvars in (group.get("hosts") or {}).items():
            address = (hostvars or {}).get("ansible_host")
            if address and ipaddress.ip_address(address) in LAB_NETWORK:
                found[name] = address
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk(inventory["all"])
    return found


def lab_processes() -> list[str]:
    """Vagrant run from this checkout, and ssh connection-sharing masters of its lab's hosts
    (other checkouts may run labs of their own on this machine at the same time)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            cwd = os.readlink(proc / "cwd")
        except (OSError, ValueError):
            continue
        vagrant = any(Path(arg).name == "vagrant" for arg in args.split()[:2])
        if (vagrant and cwd == str(ROOT)) or (str(ROOT) in args and ".lab/cp" in args):
            found.append(args)
    return found


def leftovers() -> list[str]:
    """What a destroyed lab must not leave behind."""
    found = [f"container {c}" for c in Lab({}).containers()]
    networks = run(["docker", "network", "ls", "--format", "{{ .Name }}"]).stdout.split()
    found += [f"network {n}" for n in networks if n == f"vagrant_network_{LAB_NETWORK}"]
    paths = (ROOT / ".vagrant", ROOT / ".lab/cp")
    found += [f"path {p.relative_to(ROOT)}" for p in paths if p.exists()]
    found += [f"process {args}" for args in lab_processes()]
    return found
