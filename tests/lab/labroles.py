"""Helpers of the role tests: run Python on a lab host (with a worker's environment when asked)
and read the lab inventory's secrets, so that the tests probe the services the way clients do."""

from __future__ import annotations

import base64
import json
import os
import shlex
import time
from typing import Any

import yaml
from labhosts import ROOT, Lab, run

HUB = "a"
# The hub's server as inventory/group_vars/redis.yml picks it: valkey with LAB_REDIS_FLAVOR=valkey
# (`make lab-valkey`), else Debian 12's default, redis. Its unit and its CLI.
HUB_FLAVOR = os.environ.get("LAB_REDIS_FLAVOR") or "redis"
HUB_SERVER = f"{HUB_FLAVOR}-server"
HUB_CLI = f"{HUB_FLAVOR}-cli"
WORKER = "b"
# A lab host outside `crawlers` (the demo site and a forward proxy).
OUTSIDER = "web"
VENV_PYTHON = "/opt/crawlfleet/venv/bin/python"
CRAWLER_ENV = "/etc/crawlfleet/crawler.env"
# The services each lab host must run, by the inventory's function groups.
SERVICES = {
    "a": [
        HUB_SERVER,
        "crawlfleet-proxypool",
        "crawlfleet-accountpool",
        "crawlfleet-firewall",
        "crawlfleet-dashboard",
    ],
    "web": ["crawlfleet-demosite", "tinyproxy"],
    "proxy": ["tinyproxy"],
}


def lab_secret(name: str) -> str:
    """A lab-only secret of inventory/group_vars/all/vault.yml (plain text in the lab)."""
    vault = yaml.safe_load((ROOT / "inventory/group_vars/all/vault.yml").read_text())
    return str(vault[name])


def host_python(lab: Lab, host: str, code: str, worker_env: bool = False) -> Any:
    """Run `code` with the release's Python on `host` as root and return what it prints as JSON.

    With worker_env the crawler environment (/etc/crawlfleet/crawler.env) is loaded first, as the
    crawler@ unit does. The code travels base64-encoded, so no quoting can break it."""
    encoded = base64.b64encode(code.encode()).decode()
    python = VENV_PYTHON if worker_env or host != OUTSIDER else "python3"
    load = f"set -a; . {CRAWLER_ENV}; set +a; " if worker_env else ""
    inner = f"{load}echo {encoded} | base64 -d | {python} -"
    out = lab.ssh(host, f"sudo sh -c {shlex.quote(inner)}").stdout
    return json.loads(out.strip().splitlines()[-1])


def tcp_probe(lab: Lab, host: str, address: str, ports: list[int]) -> dict[int, str]:
    """From `host`: 'open', 'refused' or 'timeout' for each TCP port of `address`."""
    code = f"""
import json, socket
result = {{}}
for port in {ports!r}:
    try:
        socket.create_connection(({address!r}, port), timeout=3).close()
        result[port] = "open"
    except ConnectionRefusedError:
        result[port] = "refused"
    except OSError:
        result[port] = "timeout"
print(json.dumps(result))
"""
    encoded = base64.b64encode(code.encode()).decode()
    out = lab.ssh(host, f"echo {encoded} | base64 -d | python3 -").stdout
    return {int(port): state for port, state in json.loads(out.strip()).items()}


def restart_container(lab: Lab, host: str, timeout: float = 120) -> None:
    """`docker restart` the host's container, then wait until systemd has finished booting."""
    run(["docker", "restart", f"crawlfleet-{host}"], timeout=120)
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = lab.ssh(host, "systemctl is-system-running --wait", check=False)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(1)
    raise AssertionError(f"{host} did not finish booting after docker restart (state {state!r})")


def inactive_services(lab: Lab, host: str) -> dict[str, str]:
    """The services `host` must run that are not active, with their state."""
    states = {}
    for service in SERVICES[host]:
        proc = lab.ssh(host, f"systemctl is-active {service}", check=False)
        states[service] = proc.stdout.strip()
    return {service: state for service, state in states.items() if state != "active"}
