"""Print what runs where in the lab: one row per inventory host (address, groups, systemd state,
the appliance's running services), asked over SSH with Ansible like every other lab operation.

Arguments are Vagrant's machine states (``a=running b=not_created``); only running machines are
asked, the others show their state."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Services of the appliance (and of the lab's helper machines) worth showing.
SERVICE_PATTERN = re.compile(
    r"^(redis|valkey|crawl|proxypool|accountpool|demosite|tinyproxy|nftables)"
)
PROBE = (
    "systemctl is-system-running || true; echo ---; "
    "systemctl list-units --type=service --state=running --no-legend --plain | cut -d' ' -f1"
)


def ansible_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_DEPRECATION_WARNINGS="false")
    env.update(extra)
    return env


def inventory() -> tuple[dict[str, str], dict[str, list[str]]]:
    """Host -> address, host -> function groups, from ``ansible-inventory``."""
    out = subprocess.run(
        [str(ROOT / ".venv/bin/ansible-inventory"), "-i", str(ROOT / "inventory"), "--list"],
        check=True,
        capture_output=True,
        text=True,
        env=ansible_env(),
        cwd=ROOT,
    ).stdout
    data = json.loads(out)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    groups: dict[str, list[str]] = {}

    def walk(group: str) -> None:
        for host in data.get(group, {}).get("hosts", []):
            if group not in ("all", "ungrouped"):
                groups.setdefault(host, []).append(group)
            else:
                groups.setdefault(host, [])
        for child in data.get(group, {}).get("children", []):
            walk(child)

    walk("all")
    addresses = {host: str(hostvars.get(host, {}).get("ansible_host", host)) for host in groups}
    return addresses, groups


def probe(hosts: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Host -> (systemd state, running appliance services); unreachable hosts say so."""
    if not hosts:
        return {}
    with tempfile.TemporaryDirectory() as tree:
        # The tree callback (ansible-core's own) leaves one JSON result per host in `tree`.
        env = ansible_env(
            ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
            ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.tree",
            ANSIBLE_CALLBACK_TREE_DIR=tree,
        )
        subprocess.run(
            [
                str(ROOT / ".venv/bin/ansible"),
                "all",
                "-i",
                str(ROOT / "inventory"),
                "-T",
                "10",
                "-m",
                "ansible.builtin.shell",
                "-a",
                PROBE,
            ],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        results = {p.name: json.loads(p.read_text()) for p in Path(tree).iterdir()}
    found: dict[str, tuple[str, list[str]]] = {}
    for host in hosts:
        result = results.get(host, {})
        if result.get("unreachable") or "stdout" not in result:
            found[host] = ("unreachable", [])
            continue
        state, _, units = result["stdout"].partition("---")
        services = [u.removesuffix(".service") for u in units.split() if SERVICE_PATTERN.match(u)]
        found[host] = (state.strip() or "unknown", services)
    return found


def main(argv: list[str]) -> int:
    machines = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    addresses, groups = inventory()
    hosts = sorted(groups)
    running = [host for host in hosts if machines.get(host) == "running"]
    states: dict[str, tuple[str, list[str]]] = {
        host: (machines.get(host, "no machine"), []) for host in hosts
    }
    states.update(probe(running))
    rows = [("HOST", "ADDRESS", "GROUPS", "SYSTEMD", "SERVICES")]
    for host in hosts:
        state, services = states[host]
        rows.append(
            (
                host,
                addresses[host],
                ",".join(groups[host]) or "-",
                state,
                ", ".join(services) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[-1]
        )
    return 0 if all(states[h][0] in ("running", "degraded") for h in hosts) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
