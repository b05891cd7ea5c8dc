"""Drive a crawl in the lab from the control node: reset it, start it, watch it, wait for its end,
read what it collected, and sum it up. `make demo`, the lab tests and the lab benchmark use it.

Everything goes through the appliance's own interfaces: `ansible-playbook
ansible/playbooks/crawl.yml` (or systemctl on a worker) starts and stops the crawler units, and the
hub's Redis is read from a worker with the worker's environment (/etc/crawlfleet/crawler.env) —
the hub's firewall admits only the crawler hosts, not this machine.

    python scripts/labcrawl.py demo     # reset, start with crawl.yml, live view, summary
    python scripts/labcrawl.py status   # one snapshot as JSON
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
KEY = ROOT / ".lab/ssh/vagrant_insecure_key"
VENV_BIN = "/opt/crawlfleet/venv/bin"
VENV_PYTHON = f"{VENV_BIN}/python"
CRAWLER_ENV = "/etc/crawlfleet/crawler.env"
# The hub's view of one spider, read on a worker: the frontier's numbers, each worker's Scrapy
# stats (pushed by the WorkerStats extension) and the pools' sizes.
SNAPSHOT_CODE = """
import json, os
from crawlfleet.hub.connect import get_redis
from crawlfleet.views.crawl import spider_snapshot
from crawlfleet.views.pools import PoolConfig, pool_counts
client = get_redis(os.environ["REDIS_URL"], socket_timeout=10, socket_connect_timeout=5)
view = spider_snapshot(client, SPIDER, with_scrapy=True)
view["pools"] = pool_counts(PoolConfig(
    proxypool_url=os.environ.get("PROXYPOOL_URL", ""),
    proxypool_api_key=os.environ.get("PROXYPOOL_API_KEY", ""),
    accountpool_url=os.environ.get("ACCOUNTPOOL_URL", ""),
    accountpool_api_key=os.environ.get("ACCOUNTPOOL_API_KEY", ""),
    accountpool_site="demosite"))
print(json.dumps(view))
"""
# The item id of every entry of the items stream, repeats included, read as `crawlfleet export`
# reads it.
ITEMS_CODE = """
import json, os
from crawlfleet.commands.export import iter_stream
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.connect import get_redis
client = get_redis(os.environ["REDIS_URL"], socket_timeout=30)
print(json.dumps([item_id for item_id, _ in iter_stream(client, SpiderKeys(SPIDER).items)]))
"""
PURGE = "crawlfleet purge {spider} --yes --force"
RUNNING_STATES = ("active", "activating", "deactivating", "reloading")


def lab_env() -> dict[str, str]:
    """The environment of lab commands: Debian's docker client before /usr/local/bin's newer
    one, the venv's ansible, this checkout's ansible.cfg, plain output, Vagrant's provider."""
    env = dict(os.environ)
    env.update(
        PATH=f"{ROOT / '.venv/bin'}:/usr/sbin:/usr/bin:/sbin:/bin:{env.get('PATH', '')}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="true",
        ANSIBLE_FORCE_COLOR="false",
        VAGRANT_CHECKPOINT_DISABLE="1",
        VAGRANT_DEFAULT_PROVIDER=env.get("LAB_PROVIDER", "docker"),
    )
    return env


def run(
    args: list[str], timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """A command from the repository root; a failure raises with the command's output."""
    proc = subprocess.run(
        args, cwd=ROOT, env=lab_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n"
            f"--- stderr\n{proc.stderr[-3000:]}"
        )
    return proc


def inventory_hosts(
    inventory: Path = ROOT / "inventory",
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Host -> address and group -> hosts of the (YAML) inventory, children included."""
    data = yaml.safe_load((inventory / "hosts.yml").read_text())
    addresses: dict[str, str] = {}
    groups: dict[str, list[str]] = {}

    def walk(name: str, group: dict[str, Any]) -> list[str]:
        members = []
        for host, hostvars in (group.get("hosts") or {}).items():
            members.append(host)
            if (hostvars or {}).get("ansible_host"):
                addresses[host] = str(hostvars["ansible_host"])
        for child, body in (group.get("children") or {}).items():
            members += walk(child, body or {})
        groups[name] = sorted(set(members))
        return members

    walk("all", data["all"])
    return addresses, groups


@dataclass
class LabCrawl:
    """One spider's crawl on the lab's crawler hosts, read through `reader` (a worker)."""

    spider: str = "book"
    reader: str = "b"
    addresses: dict[str, str] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.addresses:
            self.addresses, self.groups = inventory_hosts()

    @property
    def crawlers(self) -> list[str]:
        return self.groups.get("crawlers", [])

    # -- reaching the hosts ------------------------------------------------------------------
    def ssh(
        self, host: str, command: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return run(
            [
                "ssh", "-i", str(KEY),
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                f"vagrant@{self.addresses[host]}", command,
            ],
            timeout=timeout,
            check=check,
        )  # fmt: skip

    def worker_shell(self, host: str, command: str, timeout: float = 120) -> str:
        """`command` as root on a worker, with the crawler's environment loaded."""
        inner = f"set -a; . {CRAWLER_ENV}; set +a; PATH={VENV_BIN}:$PATH; {command}"
        return self.ssh(host, f"sudo sh -c {shlex.quote(inner)}", timeout=timeout).stdout

    def worker_python(self, code: str, host: str | None = None, wrapper: str = "") -> Any:
        """Run `code` (with SPIDER defined) in the release's Python on a worker, optionally under
        a wrapper command (such as faketime); what it prints last, as JSON."""
        source = f"SPIDER = {self.spider!r}\n{code}"
        encoded = base64.b64encode(source.encode()).decode()
        command = f"echo {encoded} | base64 -d | {wrapper} {VENV_PYTHON} -"
        out = self.worker_shell(host or self.reader, command)
        return json.loads(out.strip().splitlines()[-1])

    # -- crawl control -------------------------------------------------------------------------
    def units(self, host: str) -> dict[str, str]:
        """crawler@<spider>-N units of `host` -> their state (active, inactive, failed, ...)."""
        out = self.ssh(
            host,
            f"systemctl list-units --all --plain --no-legend 'crawler@{self.spider}-*.service'",
            check=False,
        ).stdout
        return {line.split()[0]: line.split()[2] for line in out.splitlines() if line.strip()}

    def running_units(self, hosts: Iterable[str] | None = None) -> dict[str, list[str]]:
        found = {}
        for host in hosts if hosts is not None else self.crawlers:
            names = [u for u, state in self.units(host).items() if state in RUNNING_STATES]
            if names:
                found[host] = names
        return found

    def systemctl(self, verb: str, hosts: Iterable[str] | None = None) -> None:
        """`systemctl verb crawler@<spider>-1..N` on the given crawler hosts (default: all)."""
        for host in hosts if hosts is not None else self.crawlers:
            names = " ".join(
                f"crawler@{self.spider}-{n}" for n in range(1, self.processes_per_host(host) + 1)
            )
            self.ssh(host, f"sudo systemctl {verb} {names}", timeout=180)

    def processes_per_host(self, host: str) -> int:
        """crawler_processes_per_host as the inventory sets it (the lab: 1), else the CPUs."""
        path = ROOT / "inventory/group_vars/crawlers.yml"
        value = (yaml.safe_load(path.read_text()) or {}).get("crawler_processes_per_host")
        if str(value).isdigit():
            return int(value)
        return int(self.ssh(host, "nproc").stdout.strip() or 1)

    def site_rate_limit(self) -> int:
        """lab_demosite_rate_limit as the inventory sets it: API requests/s the site allows an
        address (0: no limit)."""
        path = ROOT / "inventory/group_vars/lab.yml"
        value = (yaml.safe_load(path.read_text()) or {}).get("lab_demosite_rate_limit")
        return int(value) if str(value).isdigit() else 0

    def crawl_playbook(self, action: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return run(
            [
                "ansible-playbook", "ansible/playbooks/crawl.yml", "-i", "inventory",
                "-e", f"crawler_crawl_action={action}", *extra,
            ],
            timeout=600,
        )  # fmt: skip

    def reset(self) -> None:
        """Stop every crawler unit and delete the spider's keys on the hub: a crawl from zero."""
        self.systemctl("stop")
        inner = f"set -a; . {CRAWLER_ENV}; set +a; {VENV_BIN}/{PURGE.format(spider=self.spider)}"
        proc = self.ssh(self.reader, f"sudo sh -c {shlex.quote(inner)}", check=False)
        if proc.returncode != 0 and "nothing to purge" not in proc.stderr:
            raise RuntimeError(f"purging the crawl failed: {proc.stderr.strip()}")

    # -- reading the hub -----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        view: dict[str, Any] = self.worker_python(SNAPSHOT_CODE)
        return view

    def item_ids(self) -> list[str]:
        ids: list[str] = self.worker_python(ITEMS_CODE)
        return ids

    def wait_done(
        self,
        timeout: float,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
        interval: float = 2.0,
        hosts: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Poll until no crawler unit runs and nothing is queued or leased; the last snapshot.

        Raises when that does not happen within `timeout` seconds, with the last snapshot."""
        deadline = time.monotonic() + timeout
        watched = list(hosts) if hosts is not None else self.crawlers
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            view = self.snapshot()
            if on_poll:
                on_poll(view)
            idle = not view.get("queued") and not view.get("leased") and view.get("total")
            if idle and not self.running_units(watched):
                return self.snapshot()
            time.sleep(interval)
        raise TimeoutError(
            f"the crawl did not finish within {timeout:.0f} s; units running: "
            f"{self.running_units(watched)}; last view: {summary_numbers(view)}"
        )

    def wait_progress(self, fraction: float, timeout: float = 300) -> dict[str, Any]:
        """Poll until `fraction` of the catalogue is collected (for drills mid-crawl)."""
        deadline = time.monotonic() + timeout
        view: dict[str, Any] = {}
        while time.monotonic() < deadline:
            view = self.snapshot()
            total, items = view.get("total") or 0, view.get("items") or 0
            if total and items >= fraction * total:
                return view
            time.sleep(0.5)
        raise TimeoutError(f"the crawl did not reach {fraction:.0%} in {timeout:.0f} s: {view}")


@contextlib.contextmanager
def hosts_added(group: str, hosts: dict[str, str]) -> Iterator[None]:
    """inventory/hosts.yml with more hosts (name -> address) in `group` (docs/deploy.md, "Adding a
    worker" and "Three hubs: Sentinel failover"); the file is restored afterwards. The Vagrantfile
    reads the same file, so `vagrant up NAME` works."""
    path = ROOT / "inventory/hosts.yml"
    original = path.read_text()
    data = yaml.safe_load(original)
    taken = set(data["all"].get("hosts") or {}) & set(hosts)
    if taken:
        raise ValueError(f"inventory/hosts.yml already has host(s) {sorted(taken)}")
    members = yaml.safe_load(original)["all"]["children"][group]["hosts"] or {}
    block = f"    {group}:\n      hosts:\n" + "".join(f"        {name}:\n" for name in members)
    # An empty group (redis_cluster) is `hosts: {}` in the file: a list of hosts from here on.
    edited = original.replace(f"    {group}:\n      hosts: {{}}\n", block, 1)
    edits = [
        (
            "    c:\n      ansible_host: 172.30.0.12\n",
            "".join(f"    {name}:\n      ansible_host: {ip}\n" for name, ip in hosts.items()),
        ),
        (block, "".join(f"        {name}:\n" for name in hosts)),
    ]
    for anchor, addition in edits:
        if anchor not in edited:
            raise ValueError(f"inventory/hosts.yml has no {anchor!r} to add {sorted(hosts)} after")
        edited = edited.replace(anchor, anchor + addition, 1)
    path.write_text(edited)
    try:
        yield
    finally:
        path.write_text(original)


@contextlib.contextmanager
def worker_added(name: str, address: str, timeout: float = 1200) -> Iterator[float]:
    """A worker host `name` (at `address`) added to the running lab as docs/deploy.md says
    ("Adding a worker": the machine, the hubs' facts, `site.yml --limit NAME`); yields the wall
    seconds of that `site.yml` run. The machine is destroyed and the inventory restored after."""
    with hosts_added("crawlers", {name: address}):
        try:
            run(["vagrant", "up", name, "--no-provision"], timeout=900)
            run(["ansible", "redis:proxypool:accountpool", "-m", "ansible.builtin.setup"])
            start = time.monotonic()
            run(["ansible-playbook", "site.yml", "--limit", name], timeout=timeout)
            yield time.monotonic() - start
        finally:
            run(["vagrant", "destroy", "-f", name], timeout=300)


def summary_numbers(view: dict[str, Any]) -> dict[str, Any]:
    keys = ("total", "items", "queued", "leased", "acked", "enqueued", "filtered", "workers_alive")
    return {k: view.get(k) for k in keys}


def per_host(view: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Pages acknowledged and items written by each worker host (all its processes)."""
    hosts: dict[str, dict[str, int]] = {}
    for row in view.get("workers") or []:
        # A worker that has finished is no longer registered: its id starts with its host name.
        host = row.get("host") or row["id"].split(":")[0]
        entry = hosts.setdefault(host, {"pages": 0, "items": 0, "processes": 0})
        entry["pages"] += int(row.get("acked") or 0)
        entry["items"] += int((row.get("scrapy") or {}).get("item_scraped_count") or 0)
        entry["processes"] += 1
    return hosts


def scrapy_total(view: dict[str, Any], name: str) -> int:
    """One Scrapy stat summed over every worker process of the crawl."""
    return sum(int((row.get("scrapy") or {}).get(name) or 0) for row in view.get("workers") or [])


def learned_lines(keys: list[dict[str, Any]], limit: int) -> list[str]:
    """What each (site, proxy) key learned, beside the site's true per-address limit (the
    inventory's lab_demosite_rate_limit, which nothing in the crawl was told)."""
    truth = f"the site allows {limit}/s per address" if limit else "the site sets no limit"
    lines = []
    for k in sorted(keys, key=lambda k: str(k["key"])):
        if k.get("learned") is None and k.get("ceiling") is None:
            continue
        lines.append(
            f"learned: {k['key']}: {k['learned'] or 0:.1f}/s clean, ceiling "
            f"{k['ceiling'] or 0:.1f}/s, {k['phase']} ({truth})"
        )
    return lines


def pace_line(what: str, rate: float, proxies: int | None, limit: int) -> str:
    """The crawl's pace as a fraction of what the proxies allow (issue 16)."""
    if not proxies or not limit:
        return f"pace ({what}): {rate:.1f} requests/s (no proxy-bound limit known)"
    allowed = proxies * limit
    return (
        f"pace ({what}): {rate:.1f} requests/s = {rate / allowed:.2f} of the {allowed} requests/s "
        f"the site allows {proxies} proxies ({limit}/s per address, lab_demosite_rate_limit)"
    )


# -- the demo ------------------------------------------------------------------------------------
class LiveView:
    """One line per poll: elapsed time, progress, queue, items and pages/s per worker host."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.last: tuple[float, dict[str, int]] | None = None
        # the cluster's pages/s over each poll interval that began with requests waiting
        self.busy_rates: list[float] = []
        self._waiting = False

    def __call__(self, view: dict[str, Any]) -> None:
        now = time.monotonic()
        pages = {host: entry["pages"] for host, entry in per_host(view).items()}
        rates = ""
        if self.last is not None and now > self.last[0]:
            span = now - self.last[0]
            rates = "  ".join(
                f"{host} {(count - self.last[1].get(host, 0)) / span:5.1f}/s"
                for host, count in sorted(pages.items())
            )
            if self._waiting:
                done = sum(pages.values()) - sum(self.last[1].values())
                self.busy_rates.append(done / span)
        self.last = (now, pages)
        self._waiting = int(view.get("queued") or 0) > 0
        total, items = view.get("total") or 0, view.get("items") or 0
        filled = int(24 * items / total) if total else 0
        bar = "#" * filled + "." * (24 - filled)
        print(
            f"  {now - self.started:5.0f}s [{bar}] {items:>6,}/{total or '?':>} books"
            f"  queue {view.get('queued') or 0:>5,}  in flight {view.get('leased') or 0:>3}"
            f"  pages/s {rates or '-'}",
            flush=True,
        )


def print_summary(
    crawl: LabCrawl,
    view: dict[str, Any],
    ids: list[str],
    elapsed: float,
    busy_rates: list[float] | None = None,
) -> int:
    total = int(view.get("total") or 0)
    distinct = len(set(ids))
    hosts = per_host(view)
    pages = sum(entry["pages"] for entry in hosts.values()) or 1
    pools = view.get("pools") or {}
    status_403 = scrapy_total(view, "downloader/response_status_count/403")
    status_429 = scrapy_total(view, "downloader/response_status_count/429")
    ok = distinct == total and total > 0
    print()
    print(
        f"crawl {'finished' if ok else 'INCOMPLETE'} in {elapsed:.0f} s: "
        f"{distinct:,} of {total:,} books collected"
        f" ({len(ids) - distinct} collected twice after a retry; the export keeps one of each)"
    )
    print(
        f"  catalogue: the lab's demo site serves {total:,} books (lab_demosite_books in "
        "inventory/group_vars/lab.yml; the book's site has 9,216)"
    )
    for host, entry in sorted(hosts.items()):
        print(
            f"  worker {host:<6} {entry['processes']} process(es)  {entry['pages']:>6,} pages"
            f" ({100 * entry['pages'] / pages:4.1f} %)  {entry['items']:>6,} books"
        )
    bloom = view.get("dupefilter") or {}
    print(
        f"  frontier: {view.get('enqueued') or 0:,} requests enqueued, "
        f"{bloom.get('fingerprints') or 0:,} fingerprints in the Bloom filter, "
        f"{view.get('filtered') or 0:,} duplicates filtered, "
        f"{view.get('requeued') or 0:,} requeued, {view.get('deadletter') or 0} dead letters"
    )
    proxies = (pools.get("proxypool") or {}).get("count")
    tokens = (pools.get("accountpool") or {}).get("count")
    print(
        f"  proxies: {proxies if proxies is not None else '?'} in the pool; "
        f"{scrapy_total(view, 'proxy/assigned'):,} requests sent through them, "
        f"{scrapy_total(view, 'proxy/pool/fetched')} fetched from /random"
    )
    print(
        f"  tokens: {tokens if tokens is not None else '?'} logged-in accounts in the pool; "
        f"{scrapy_total(view, 'auth/assigned'):,} requests authorized, "
        f"{scrapy_total(view, 'auth/pool/fetched')} tokens fetched"
    )
    print(
        f"  bans met: {status_403 + status_429:,} responses refused by the site "
        f"(per-address rate limit), {scrapy_total(view, 'proxy/banned'):,} proxy quarantines, "
        f"{scrapy_total(view, 'proxy/retry/count'):,} retries through another proxy — "
        f"{'all survived' if ok else 'NOT all survived'}"
    )
    print(f"  elapsed: {elapsed:.0f} s, {pages / max(elapsed, 1):.1f} pages/s for the cluster")
    limit = crawl.site_rate_limit()
    print("  " + pace_line("overall", pages / max(elapsed, 1), proxies, limit))
    if busy_rates:
        # the median poll interval while requests waited: start-up and the idle close left out
        steady = sorted(busy_rates)[len(busy_rates) // 2]
        print("  " + pace_line("while requests waited", steady, proxies, limit))
    polite = view.get("politeness") or {}
    if polite:
        print(f"  bound by: {polite['bound']} ({polite.get('reason') or '-'}) at the end")
        for line in learned_lines(polite.get("keys") or [], limit):
            print("  " + line)
    hub = crawl.addresses.get((crawl.groups.get("redis") or ["a"])[0], "?")
    print("next:")
    print(
        f"  vagrant ssh {crawl.reader} -c \"sudo sh -c 'set -a; . {CRAWLER_ENV}; "
        f"{VENV_BIN}/crawlfleet status --watch'\"   # the operators' view, live"
    )
    print(
        f"  ssh -i .lab/ssh/vagrant_insecure_key -L 8060:{hub}:8060 vagrant@{hub}   # then "
        "http://localhost:8060, password: dashboard_api_key (inventory/group_vars/redis.yml)"
    )
    print("  ansible-playbook ansible/playbooks/crawl.yml   # the crawl's state")
    print("  make lab-down   # when you are done")
    return 0 if ok else 1


def demo(timeout: float) -> int:
    crawl = LabCrawl()
    print(
        f"==> resetting the crawl '{crawl.spider}' (crawler units stopped, its keys purged "
        "but what its politeness keys learned)"
    )
    crawl.reset()
    print(
        "==> ansible-playbook ansible/playbooks/crawl.yml -e crawler_crawl_action=start "
        f"(workers: {', '.join(crawl.crawlers)})"
    )
    started = time.monotonic()
    crawl.crawl_playbook("start")
    print("==> crawling (every 3 s: progress, queue, requests in flight, pages/s per worker)")
    live = LiveView(started)
    view = crawl.wait_done(timeout, on_poll=live, interval=3)
    elapsed = time.monotonic() - started
    return print_summary(crawl, view, crawl.item_ids(), elapsed, live.busy_rates)


def main(argv: list[str]) -> int:
    if argv[:1] == ["demo"]:
        return demo(float(os.environ.get("DEMO_CRAWL_TIMEOUT", "420")))
    if argv[:1] == ["status"]:
        print(json.dumps(LabCrawl().snapshot(), indent=2))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
