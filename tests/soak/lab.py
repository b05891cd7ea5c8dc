"""`make soak-lab` (issue 37): the soak on the lab's hosts, judged by the same checkers.

The lab runs as site.yml made it: the hub's Redis and the pools on ``a``, the workers on the
crawler hosts (``b``, ``c``) under systemd, the forward proxies on the lab's proxy hosts. The soak
adds its project (``project/``, deployed as a team's own project is: docs/projects.md) with
``crawlers.yml``, and its synthetic web on the demo site's host: the lab's hosts cannot reach
another host's loopback, so the web's hosts are names there (``h<i>.soak.lab``, ``web.py
--domain``), which every crawler and proxy host resolves to the web host through ``/etc/hosts``.

The faults are the loopback soak's, struck as an operator's week strikes them: ``systemctl kill
-s KILL`` of a worker unit (systemd starts it again), SIGSTOP of the hub's server, ``systemctl
restart`` of it (it loads its AOF), a forward proxy's unit stopped for a minute, a ban storm, the
rolling-restart playbook, and a worker host cut from the lab network (``docker network
disconnect``) for 30 s. What the judging reads (the access log, the items `crawlfleet export`
writes, the workers' and the pools' journals) is copied into the work directory at the end.

    scripts/soak.sh --lab --minutes 30 --hosts 1000 --pages 300000 --out results/soak-lab

The lab must be up (``make lab-up``); ``make soak-lab`` brings up a fresh one and destroys it.
The inventory's crawlers.yml is restored at the end.
"""

from __future__ import annotations

import argparse
import base64
import inspect
import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from labcrawl import ROOT, LabCrawl, run
from soak import schedule
from soak.judge import ITEMS
from soak.run import (
    ROOTS,
    SPIDER,
    SetupError,
    Soak,
    _status,
    bloom_answers,
    hub_numbers,
    lost_fingerprints,
)
from support.waiting import wait_until

PROJECT = Path(__file__).resolve().parent / "project"
WEB_SOURCE = Path(__file__).resolve().parent / "web.py"
GROUP_VARS = ROOT / "inventory/group_vars/crawlers.yml"
CRAWLER_DEFAULTS = ROOT / "roles/crawler/defaults/main.yml"
DOMAIN = "soak.lab"
WEB_HOST = "web"  # the demo site's host serves the synthetic web too
PORT, ADMIN = 8077, 8078
REMOTE = "/var/tmp/crawlfleet-soak"  # the web's files on its host
WEB_UNIT = "crawlfleet-soak-web"
NETWORK = "vagrant_network_172.30.0.0/24"
HOSTS_BEGIN, HOSTS_END = "# BEGIN crawlfleet soak web", "# END crawlfleet soak web"


# The soak's project, as docs/projects.md adds a team's project beside the inventory's others.
def soak_project(src: Path, roots: str, processes: int, seen_cache: int) -> dict[str, Any]:
    return {
        "name": "soakproject", "src": str(src), "settings": "soakproject.settings",
        "env": {"SOAK_ROOTS": roots, "SOAK_SEEN_CACHE": str(seen_cache)},
        "spiders": [{"name": SPIDER, "processes": processes}],
    }  # fmt: skip


# Python run on the hub's reader worker: the hub's numbers and the crawl, as the loopback soak
# measures them (the same functions, sent as source).
PRELUDE = """
import json, os
import redis  # the functions' annotations name it
from crawlfleet.hub.connect import get_redis
from typing import Any
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.views.crawl import spider_snapshot
SPIDER = "soak"
client = get_redis(os.environ["REDIS_URL"], socket_timeout=30, socket_connect_timeout=5)
"""
SOURCES = "\n".join(inspect.getsource(f) for f in (hub_numbers, bloom_answers))
# Python run on a crawler host with the system's python3: each soak unit's main process.
PROCESSES = """
import json, re, subprocess
from pathlib import Path
found = {}
for n in range(1, PER_HOST + 1):
    unit = f"crawler@soak-{n}"
    pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit],
                         capture_output=True, text=True).stdout.strip()
    if pid.isdigit() and int(pid):
        found[n] = [int(pid), *_status(int(pid))]
print(json.dumps(found))
"""


class _Indented(yaml.SafeDumper):
    """Lists indented under their key, as the inventory writes them (yamllint passes)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


@dataclass
class LabWorker:
    """One soak unit: its name in the schedule (host and number), its host and its unit."""

    name: str
    host: str
    number: int

    @property
    def unit(self) -> str:
        return f"crawler@{SPIDER}-{self.number}"


class LabSoak(Soak):
    def __init__(self, args: argparse.Namespace) -> None:
        self.crawl = LabCrawl(spider=SPIDER)
        args.domain = DOMAIN
        super().__init__(args)
        self.port = PORT
        self.admin = ADMIN
        self.workers: list[Any] = self._units()
        args.workers = len(self.workers)  # what the record and the report say ran
        self._pids: dict[str, tuple[str, int]] = {}  # worker name -> (host, pid) last seen
        self._redis_unit = ""
        self._original_vars = ""

    # -- what differs from loopback ----------------------------------------------------------

    def _units(self) -> list[LabWorker]:
        """The soak's units: ``--per-host`` on each crawler host."""
        hosts, per_host = self.crawl.crawlers, self.args.per_host
        return [LabWorker(f"{h}{n}", h, n) for h in hosts for n in range(1, per_host + 1)]

    def worker_names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self._units())

    def proxy_names(self) -> tuple[str, ...]:
        return tuple(self.crawl.groups.get("forward_proxies", []))

    def can_cut(self) -> bool:
        return True  # docker network disconnect

    def sentinel(self) -> bool:
        return False

    @property
    def hub_host(self) -> str:
        return self.crawl.groups["redis"][0]

    # -- bring-up ----------------------------------------------------------------------------

    def start(self) -> None:
        for host in sorted({*self.crawl.crawlers, WEB_HOST, self.hub_host}):
            if self.crawl.ssh(host, "true", check=False, timeout=30).returncode != 0:
                raise SetupError(f"--lab: lab host {host} does not answer (make lab-up first)")
        self.work.mkdir(parents=True, exist_ok=True)
        self.access_log.write_bytes(b"")
        self.units("stop")
        self.crawl.reset()  # the spider's keys deleted on the hub: a crawl from zero
        self.roots = ",".join(
            self.web.url(h, 0, PORT) for h in range(min(ROOTS, len(self.web.hosts)))
        )
        self._start_web()
        self._name_hosts()
        self._deploy()
        self._redis_unit = self._find_redis_unit()
        self.units("start")
        self.started = time.time()

    def _start_web(self) -> None:
        source = base64.b64encode(WEB_SOURCE.read_bytes()).decode()
        args = self.args
        command = " ".join(
            shlex.quote(a)
            for a in [
                "systemd-run", f"--unit={WEB_UNIT}", "--collect", "--property=Restart=no",
                "/usr/bin/python3", f"{REMOTE}/web.py", "--port", str(PORT), "--admin-port",
                str(ADMIN), "--hosts", str(args.hosts), "--pages", str(args.pages), "--seed",
                str(args.seed), "--domain", DOMAIN, "--access-log", f"{REMOTE}/access.log",
            ]
        )  # fmt: skip
        script = (
            f"systemctl stop {WEB_UNIT} 2>/dev/null || true; rm -rf {REMOTE}; mkdir -p {REMOTE};"
            f" echo {source} | base64 -d > {REMOTE}/web.py; {command}"
        )
        self.crawl.ssh(WEB_HOST, f"sudo sh -c {shlex.quote(script)}")

        def ready() -> bool:
            out = self.crawl.ssh(
                WEB_HOST, f"sudo journalctl -u {WEB_UNIT} -o cat --no-pager", check=False
            ).stdout
            if "ready" in out.split():
                return True
            state = self.crawl.ssh(WEB_HOST, f"systemctl is-active {WEB_UNIT}", check=False)
            if state.stdout.strip() in ("failed", "inactive"):
                raise RuntimeError(f"the soak's web did not start on {WEB_HOST}: {out[-2000:]}")
            return False

        wait_until(ready, f"the soak's web ready on {WEB_HOST}", timeout=120, interval=2)

    def _name_hosts(self, hosts: list[str] | None = None) -> None:
        """Every crawler and proxy host (or ``hosts``) resolves the web's names to the web host
        (/etc/hosts is docker's bind mount: rewritten in place, not replaced)."""
        address = self.crawl.addresses[WEB_HOST]
        block = "\n".join(
            [HOSTS_BEGIN, *(f"{address} {self.web.name(h.index)}" for h in self.web.hosts),
             HOSTS_END]
        )  # fmt: skip
        code = (
            "import sys\n"
            "p = '/etc/hosts'\n"
            "lines = open(p).read().split('\\n')\n"
            f"if {HOSTS_BEGIN!r} in lines:\n"
            f"    i, j = lines.index({HOSTS_BEGIN!r}), lines.index({HOSTS_END!r})\n"
            "    lines[i:j + 1] = []\n"
            "text = '\\n'.join(l for l in lines).rstrip('\\n') + '\\n' + sys.stdin.read() + '\\n'\n"
            "open(p, 'w').write(text)\n"
        )
        encoded = base64.b64encode(code.encode()).decode()
        for host in hosts or sorted({*self.crawl.crawlers, *self.proxy_names(), WEB_HOST}):
            script = f"echo {encoded} | base64 -d > /tmp/soak-hosts.py; python3 /tmp/soak-hosts.py"
            self.crawl.ssh(
                host,
                f"printf %s {shlex.quote(block)} | sudo sh -c {shlex.quote(script)}",
            )

    def _deploy(self) -> None:
        """The soak's project added to crawler_projects and deployed with crawlers.yml."""
        self._original_vars = GROUP_VARS.read_text()
        # the inventory's projects (else the role's default: bookcrawler), and the soak's
        projects = (yaml.safe_load(self._original_vars) or {}).get("crawler_projects") or (
            yaml.safe_load(CRAWLER_DEFAULTS.read_text())["crawler_projects"]
        )
        projects.append(soak_project(PROJECT, self.roots, self.args.per_host, self.args.seen_cache))
        added = yaml.dump({"crawler_projects": projects}, Dumper=_Indented, sort_keys=False)
        GROUP_VARS.write_text(
            f"{self._original_vars}\n# Added by tests/soak/lab.py (make soak-lab) while it runs.\n"
            + added
        )
        run(["ansible-playbook", "ansible/playbooks/crawlers.yml", "-i", "inventory"], timeout=1800)

    def _find_redis_unit(self) -> str:
        for unit in ("redis-server", "valkey-server"):
            state = self.crawl.ssh(self.hub_host, f"systemctl is-active {unit}", check=False)
            if state.stdout.strip() == "active":
                return unit
        raise RuntimeError(f"no redis-server or valkey-server runs on {self.hub_host}")

    def units(self, verb: str) -> None:
        """``systemctl verb`` the soak's units on every crawler host."""
        for host in self.crawl.crawlers:
            names = " ".join(w.unit for w in self.workers if w.host == host)
            self.crawl.ssh(host, f"sudo systemctl {verb} {names}", timeout=180)

    def start_worker(self, worker: Any) -> None:
        self.crawl.ssh(worker.host, f"sudo systemctl start {worker.unit}")

    # -- sampling ----------------------------------------------------------------------------

    def access_from(self, offset: int) -> bytes:
        return self.crawl.ssh(
            WEB_HOST, f"sudo tail -c +{offset + 1} {REMOTE}/access.log", timeout=120
        ).stdout.encode()

    def _hub_python(self, code: str) -> Any:
        return self.crawl.worker_python(PRELUDE + SOURCES + code)

    def hub_numbers(self) -> tuple[dict[str, Any], dict[str, Any]]:
        memory, view = self._hub_python(
            "print(json.dumps([hub_numbers(client),"
            " spider_snapshot(client, SPIDER, with_scrapy=True)]))"
        )
        return memory, view

    def snapshot(self) -> dict[str, Any]:
        view: dict[str, Any] = self._hub_python(
            "print(json.dumps(spider_snapshot(client, SPIDER)))"
        )
        return view

    def processes(self) -> dict[str, tuple[str, int, int, int]]:
        code = (
            "import re\nfrom pathlib import Path\n"
            + inspect.getsource(_status)
            + PROCESSES.replace("PER_HOST", str(self.args.per_host))
        )
        encoded = base64.b64encode(code.encode()).decode()
        found = {}
        for host in self.crawl.crawlers:
            proc = self.crawl.ssh(host, f"echo {encoded} | base64 -d | python3 -", check=False)
            if proc.returncode != 0:
                continue  # a host cut from the network: no sample of it this time
            for number, (pid, rss, threads) in json.loads(proc.stdout).items():
                name = f"{host}{number}"
                self._pids[name] = (host, pid)
                if rss:
                    found[f"{name}:{pid}"] = (host, pid, rss, threads)
        return found

    def process_of(self, worker: Any) -> tuple[str, int]:
        return self._pids.get(worker.name, (worker.host, 0))

    # -- faults ------------------------------------------------------------------------------

    def strike(self, planned: schedule.Planned, worker: Any) -> int:
        kind, target, in_flight = planned.kind, planned.target, 0
        ssh = self.crawl.ssh
        if kind == "kill-worker" and worker:
            ssh(worker.host, f"sudo systemctl kill -s KILL {worker.unit}")  # systemd restarts it
        elif kind == "freeze-hub":
            server = self._redis_unit
            ssh(self.hub_host, f"sudo sh -c 'pkill -STOP -x {server}; sleep {planned.hold};"
                f" pkill -CONT -x {server}'", timeout=60)  # fmt: skip
        elif kind == "restart-hub":
            ssh(self.hub_host, f"sudo systemctl restart {self._redis_unit}", timeout=300)
        elif kind == "stop-proxy":
            ssh(target, "sudo systemctl stop tinyproxy")
            time.sleep(planned.hold)
            ssh(target, "sudo systemctl start tinyproxy")
        elif kind == "ban-storm":
            url = f"http://127.0.0.1:{ADMIN}/storm?host={target}&seconds={planned.hold}"
            code = (
                "import urllib.request; urllib.request.urlopen(urllib.request.Request("
                f"{url!r}, method='POST'), timeout=10)"
            )
            ssh(WEB_HOST, f"python3 -c {shlex.quote(code)}")
            time.sleep(planned.hold)
        elif kind == "rolling-restart":
            in_flight += self.leased_by(self.workers)
            run(["ansible-playbook", "ansible/playbooks/rolling-restart.yml", "-i", "inventory"],
                timeout=1800)  # fmt: skip
        elif kind == "cut-worker" and worker:
            # the whole host is cut: its other units' leases are in flight too
            others = [w for w in self.workers if w.host == worker.host and w is not worker]
            in_flight += self.leased_by(others)
            container = f"crawlfleet-{worker.host}"
            address = self.crawl.addresses[worker.host]
            run(["docker", "network", "disconnect", NETWORK, container])
            try:
                time.sleep(planned.hold)
            finally:
                run(["docker", "network", "connect", "--ip", address, NETWORK, container])
            self._name_hosts([worker.host])  # docker may have rewritten its /etc/hosts
        return in_flight

    # -- the end -----------------------------------------------------------------------------

    def workers_ended(self) -> bool:
        return not self.crawl.running_units()

    def stop_workers(self) -> None:
        self.units("stop")

    def items_length(self) -> int:
        length: int = self._hub_python("print(client.xlen(SpiderKeys(SPIDER).items))")
        return length

    def export(self) -> None:
        out = self.crawl.worker_shell(
            self.crawl.reader,
            # its summary line to stderr: stdout is the items only
            f"crawlfleet export {SPIDER} -o /var/tmp/soak-items.jsonl --quiet >&2"
            " && cat /var/tmp/soak-items.jsonl && rm /var/tmp/soak-items.jsonl",
            timeout=900,
        )
        (self.work / ITEMS).write_text(out)

    def bloom(self) -> dict[str, Any]:
        lost = lost_fingerprints(self.web, PORT, self.fetched)
        fingerprints = [fp.hex() for _, fp in lost]
        layers, answers = [], []
        for i in range(0, max(len(fingerprints), 1), 1000):  # a command line holds 128 KiB
            chunk = fingerprints[i : i + 1000]
            layers, more = self._hub_python(f"print(json.dumps(bloom_answers(client, {chunk!r})))")
            answers += more
        return {"layers": layers, "seen": [page for (page, _), yes in zip(lost, answers) if yes]}

    def collect(self) -> None:
        """The access log, and each host's journal of the soak's units and the pools."""
        log = self.crawl.ssh(WEB_HOST, f"sudo cat {REMOTE}/access.log", timeout=600).stdout
        self.access_log.write_text(log)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started - 60))
        for host in self.crawl.crawlers:
            out = self.crawl.ssh(
                host,
                f"sudo journalctl -u 'crawler@{SPIDER}-*' -o cat --no-pager --since '{since}'",
                timeout=600,
            ).stdout
            (self.work / f"{host}.log").write_text(out)
        for unit in ("proxypool", "accountpool"):
            out = self.crawl.ssh(
                self.hub_host,
                f"sudo journalctl -u {unit} -o cat --no-pager --since '{since}'",
                timeout=600,
                check=False,
            ).stdout
            (self.work / f"{unit}.log").write_text(out)

    def close(self) -> None:
        self._stop.set()
        try:
            self.units("stop")
        finally:
            self.crawl.ssh(WEB_HOST, f"sudo systemctl stop {WEB_UNIT}", check=False)
            if self._original_vars:
                GROUP_VARS.write_text(self._original_vars)
