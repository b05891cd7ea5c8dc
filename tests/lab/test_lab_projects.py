"""A team's own Scrapy project on the fleet, exactly as docs/projects.md tells an operator.

examples/linkcrawler is a plain ``scrapy startproject`` project (a CrawlSpider following the demo
site's /pages/ link graph; it never imports crawlfleet) with a requirement bookcrawler's release
lacks (inflection). Copied to a temporary directory (so that a new version is one changed file),
it is added to the inventory's crawler_projects beside bookcrawler and deployed with crawlers.yml;
both projects crawl on b and c at the same time, a worker of the project is SIGKILLed mid-crawl, a
new version rolls out during the crawl (rolling-restart.yml) and is rolled back with the one
documented command (rollback.yml). Every page is collected; crawlfleet status names the project
and release of each worker. The timings of deploy, roll-out and roll-back go to
.lab/lab-projects-times.json."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from labchecks import assert_complete, in_flight
from labcrawl import LabCrawl
from labhosts import ROOT, Lab, recap, run

from crawlfleet.demosite import linkgraph

# About 8.5 minutes: `make lab-projects`, not part of make test (its budget, docs/testing.md).
pytestmark = [pytest.mark.lab, pytest.mark.projects, pytest.mark.timeout(900)]

WORKERS = ("b", "c")
GROUP_VARS = ROOT / "inventory/group_vars/crawlers.yml"
TIMES = ROOT / ".lab/lab-projects-times.json"
PROJECTS = "/opt/crawlfleet/projects"
# The inventory entry of docs/projects.md, "Deploy your own project" (src: the copy).
ENTRY = """
# Added by tests/lab/test_lab_projects.py (docs/projects.md, "Deploy your own project").
crawler_projects:
  - name: bookcrawler
    settings: bookcrawler.settings
    spiders:
      - name: book
  - name: linkcrawler
    src: {src}
    settings: linkcrawler.settings
    requirements:
      - inflection==0.5.1
    env:
      LINKCRAWLER_START_URL: "http://{{{{ hostvars[groups['demosite'][0]].crawlfleet_private_address
        }}}}:8000/pages/"
    spiders:
      - name: pages
        processes: 1
"""
# The page URLs in the items stream, in stream order.
URLS_CODE = """
import json, os
from crawlfleet.hub.connect import get_redis
client = get_redis(os.environ["REDIS_URL"], socket_timeout=30)
urls = [json.loads(f[b"item"])["url"] for _, f in client.xrange(SPIDER + ":items")]
print(json.dumps(urls))
"""


@dataclass
class Project:
    """The deployed copy of examples/linkcrawler and what the deploys measured."""

    src: Path
    lab: Lab
    times: dict[str, float] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)

    def playbook(self, name: str, *extra: str, timeout: float = 900) -> str:
        start = time.monotonic()
        proc = run(
            ["ansible-playbook", f"ansible/playbooks/{name}", "-i", "inventory", *extra],
            timeout=timeout,
        )
        self.times.setdefault(name, round(time.monotonic() - start, 1))
        counts = recap(proc.stdout)
        assert counts and all(c["failed"] == 0 for c in counts.values()), counts
        return proc.stdout

    def current(self, host: str) -> str:
        link = self.lab.ssh(host, f"readlink {PROJECTS}/linkcrawler/current").stdout.strip()
        return Path(link).name


def page_urls() -> set[str]:
    return {f"/pages/{n}.html" for n in range(linkgraph.PAGES)}


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def worker_rows(crawl: LabCrawl) -> list[dict[str, Any]]:
    """The spider's worker rows of `crawlfleet status --json` on a worker (empty while no worker
    of the spider has started)."""
    try:
        out = crawl.worker_shell(crawl.reader, f"crawlfleet status {crawl.spider} --json")
    except RuntimeError:
        return []
    rows: list[dict[str, Any]] = json.loads(out)["spiders"][0]["workers"]
    return rows


def release_rows(crawl: LabCrawl) -> dict[str, tuple[str, str]]:
    """Alive workers' host -> (project, version)."""
    return {w["host"]: (w["project"], w["version"]) for w in worker_rows(crawl) if w["alive"]}


def on_every_worker(crawl: LabCrawl) -> dict[str, tuple[str, str]] | None:
    """The release rows once the spider has an alive worker on each of b and c."""
    rows = release_rows(crawl)
    return rows if set(rows) == set(WORKERS) else None


def wait_for(check: Any, what: str, timeout: float = 300, interval: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s (last: {last})")


def pages_done(crawl: LabCrawl) -> dict[str, Any] | None:
    view = crawl.snapshot()
    idle = not view["queued"] and not view["leased"] and not view["start_urls"]
    return view if idle and view["items"] and not crawl.running_units() else None


@pytest.fixture(scope="module")
def project(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """examples/linkcrawler copied, added to the inventory, deployed; removed at the end."""
    src = tmp_path_factory.mktemp("linkcrawler") / "linkcrawler"
    shutil.copytree(ROOT / "examples/linkcrawler", src)
    original = GROUP_VARS.read_text()
    deployed = Project(src, lab)
    try:
        GROUP_VARS.write_text(original + ENTRY.format(src=src))
        deployed.playbook("crawlers.yml")
        yield deployed
    finally:
        GROUP_VARS.write_text(original)
        for spider in ("pages", "book"):
            LabCrawl(spider=spider).reset()
        deployed.playbook("crawlers.yml")
        TIMES.parent.mkdir(exist_ok=True)
        TIMES.write_text(json.dumps(deployed.times, indent=2) + "\n")


def test_a_classic_project_deploys_beside_bookcrawler(project: Project) -> None:
    lab = project.lab
    keys = {host: project.current(host) for host in WORKERS}
    assert len(set(keys.values())) == 1, keys
    project.keys.append(keys["b"])
    release = f"{PROJECTS}/linkcrawler/releases/{keys['b']}"
    for host in WORKERS:
        env = lab.ssh(host, "sudo cat /etc/crawlfleet/spiders/pages.env").stdout
        assert "SCRAPY_SETTINGS_MODULE='crawlfleet.fleetsettings'" in env
        assert "CRAWLFLEET_PROJECT_SETTINGS='linkcrawler.settings'" in env
        assert f"CRAWLFLEET_PROJECT_VERSION='{keys['b']}'" in env
        # What crawler@pages-N runs: the project's venv, its environment, the workers' account.
        listed = lab.ssh(
            host,
            "sudo -u crawlfleet-crawler sh -c 'set -a; . /etc/crawlfleet/crawler.env;"
            " . /etc/crawlfleet/spiders/pages.env; cd /var/lib/crawlfleet;"
            " exec $CRAWLFLEET_PROJECT_VENV/bin/scrapy list'",
        ).stdout.split()
        assert listed == ["pages"]
        # Two virtualenvs side by side: inflection only in the project's.
        probe = "import importlib.util as u; print(u.find_spec('inflection') is not None)"
        assert (
            lab.ssh(host, f"{release}/venv/bin/python -c {shlex.quote(probe)}").stdout.strip()
            == "True"
        )
        assert (
            lab.ssh(host, f"/opt/crawlfleet/venv/bin/python -c {shlex.quote(probe)}").stdout.strip()
            == "False"
        )
        # The project's files are shipped as they are.
        settings = lab.ssh(host, f"cat {release}/src/linkcrawler/settings.py").stdout
        assert settings == (project.src / "linkcrawler/settings.py").read_text()


def test_both_projects_crawl_together_through_a_kill_and_a_roll_out(
    project: Project, catalogue_ids: set[str]
) -> None:
    book, pages = LabCrawl(spider="book"), LabCrawl(spider="pages")
    book.reset()
    pages.reset()
    # One crawl.yml start starts every project's spiders on every worker.
    started = time.monotonic()
    run(["ansible-playbook", "ansible/playbooks/crawl.yml", "-i", "inventory",
         "-e", "crawler_crawl_action=start"], timeout=600)  # fmt: skip
    # Both at the same time on b and c, each worker naming its project and release.
    v1 = project.keys[0]
    for crawl, name in ((book, "bookcrawler"), (pages, "linkcrawler")):
        rows = wait_for(
            lambda c=crawl: on_every_worker(c),
            f"{name} workers alive on b and c",
            timeout=120,
        )
        assert {p for p, _ in rows.values()} == {name}, rows
    assert set(release_rows(pages).values()) == {("linkcrawler", v1)}

    before = wait_for(
        lambda: (v := pages.snapshot())["items"] >= 0.2 * linkgraph.PAGES and v,
        "20% of the pages",
    )
    bound = in_flight(before, "b")
    pages.ssh("b", "sudo systemctl kill --signal=KILL crawler@pages-1.service")

    # A new version of the project (one changed file) rolls out worker by worker, drained.
    settings = project.src / "linkcrawler/settings.py"
    settings.write_text(settings.read_text() + "\n# version 2\n")
    project.playbook("rolling-restart.yml")
    v2 = project.current("b")
    assert v2 != v1 and project.current("c") == v2
    project.keys.append(v2)
    # The workers the roll-out restarted report v2, and no worker still crawling runs v1.
    rows = worker_rows(pages)
    assert any(w["version"] == v2 for w in rows), rows
    assert {w["version"] for w in rows if w["alive"]} <= {v2}, rows
    project.times["pages_crawl_to_roll_out_end"] = round(time.monotonic() - started, 1)

    view = wait_for(lambda: pages_done(pages), "the pages crawl to finish", timeout=420)
    project.times["pages_crawl"] = round(time.monotonic() - started, 1)
    urls = [path_of(u) for u in pages.worker_python(URLS_CODE)]
    assert set(urls) == page_urls(), len(page_urls() - set(urls))
    assert len(urls) - len(page_urls()) <= bound, Counter(urls).most_common(3)
    assert (view["queued"], view["leased"], view["deadletter"]) == (0, 0, 0), view
    assert view["requeued"] > 0, view  # b's leases came back after the kill
    book.wait_done(timeout=420)
    assert_complete(book, catalogue_ids, in_flight_bound=0)


def test_one_command_rolls_the_project_back(project: Project) -> None:
    v1, v2 = project.keys
    out = project.playbook(
        "rollback.yml", "-e", "crawler_rollback_project=linkcrawler", timeout=600
    )
    assert "linkcrawler" in out
    assert {project.current(host) for host in WORKERS} == {v1}
    # Both releases stay on disk: rolling back again would bring v2 back.
    releases = project.lab.ssh("b", f"ls {PROJECTS}/linkcrawler/releases").stdout.split()
    assert sorted(releases) == sorted([v1, v2])
    # The project's spiders alone start (crawl.yml per project) and report the old release.
    pages = LabCrawl(spider="pages")
    pages.reset()
    crawl = ["ansible-playbook", "ansible/playbooks/crawl.yml", "-i", "inventory",
             "-e", "crawler_crawl_project=linkcrawler"]  # fmt: skip
    run([*crawl, "-e", "crawler_crawl_action=start"], timeout=600)
    rows = wait_for(
        lambda: on_every_worker(pages),
        "linkcrawler workers alive on b and c",
        timeout=120,
    )
    assert set(rows.values()) == {("linkcrawler", v1)}, rows
    assert not LabCrawl(spider="book").running_units()
    status = run([*crawl, "-e", "crawler_crawl_action=status"], timeout=300).stdout
    assert f"linkcrawler {v1}" in status
    run([*crawl, "-e", "crawler_crawl_action=stop"], timeout=300)
    assert not pages.running_units()
