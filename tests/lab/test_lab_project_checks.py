"""Bad crawler_projects entries stop on the control node, before any host changes, with one line
naming the project and the cause: a src that does not exist, a settings module that does not
import, a spider the project does not have, a requirement the wheelhouse cannot build.

The checks (roles/crawler/files/build_project.py) run against the lab's own crawlfleet wheelhouse
(built on the control node by the lab's converge); one crawlers.yml run shows the play stopping
before its first host task."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from labhosts import ROOT, Lab, recap, run

pytestmark = [pytest.mark.lab, pytest.mark.timeout(600)]

SCRIPT = ROOT / "roles/crawler/files/build_project.py"
EXAMPLE = ROOT / "examples/linkcrawler"


def wheelhouse() -> Path:
    tars = sorted(
        (ROOT / ".lab/wheelhouse").glob("wheelhouse-*.tar"), key=lambda p: p.stat().st_mtime
    )
    assert tars, "no crawlfleet wheelhouse in .lab/wheelhouse (the lab converge builds it)"
    return tars[-1]


def check(build_dir: Path, **changes: Any) -> subprocess.CompletedProcess[str]:
    project = {
        "name": "linkcrawler",
        "src": str(EXAMPLE),
        "settings": "linkcrawler.settings",
        "requirements": ["inflection==0.5.1"],
        "spiders": ["pages"],
        **changes,
    }
    spec = {"build_dir": str(build_dir), "wheelhouse": str(wheelhouse()), "projects": [project]}
    return subprocess.run(
        ["/usr/bin/python3", str(SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory, lab: Lab) -> Path:
    return tmp_path_factory.mktemp("projects")


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("crawler_projects[linkcrawler]: "), lines[0]
    return lines[0]


def test_the_example_project_passes_and_gives_the_same_release_twice(build_dir: Path) -> None:
    first, second = check(build_dir), check(build_dir)
    assert first.returncode == 0, first.stderr
    built = json.loads(first.stdout)["linkcrawler"]
    assert built["spiders"] == ["pages"]
    assert json.loads(second.stdout)["linkcrawler"] == built


def test_a_src_that_does_not_exist(build_dir: Path) -> None:
    line = one_line(check(build_dir, src="/nonexistent/linkcrawler"))
    assert "src /nonexistent/linkcrawler does not exist" in line


def test_a_settings_module_that_does_not_import(build_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "linkcrawler"
    shutil.copytree(EXAMPLE, src)
    (src / "linkcrawler/settings.py").write_text("import not_a_module_of_this_project\n")
    line = one_line(check(build_dir, src=str(src)))
    assert "settings module 'linkcrawler.settings' does not import" in line
    assert "not_a_module_of_this_project" in line
    line = one_line(check(build_dir, settings="linkcrawler.nosettings"))
    assert "'linkcrawler.nosettings' does not import" in line


def test_a_spider_the_project_does_not_have(build_dir: Path) -> None:
    line = one_line(check(build_dir, spiders=["pages", "books"]))
    assert "the project has no spider books (scrapy list: pages)" in line


def test_a_requirement_the_wheelhouse_cannot_build(build_dir: Path) -> None:
    line = one_line(check(build_dir, requirements=["crawlfleet-no-such-package-a7f3==1.0"]))
    assert "crawlfleet-no-such-package-a7f3==1.0 cannot be built" in line


def test_crawlers_yml_stops_before_any_host_changes(lab: Lab) -> None:
    bad = json.dumps(
        {
            "crawler_projects": [
                {"name": "bookcrawler", "settings": "bookcrawler.settings",
                 "spiders": [{"name": "book"}]},
                {"name": "linkcrawler", "src": str(EXAMPLE), "settings": "linkcrawler.settings",
                 "requirements": ["inflection==0.5.1"], "spiders": [{"name": "nosuchspider"}]},
            ]
        }
    )  # fmt: skip
    proc = run(
        ["ansible-playbook", "ansible/playbooks/crawlers.yml", "-i", "inventory", "-e", bad],
        timeout=600,
        check=False,
    )
    assert proc.returncode != 0
    assert "crawler_projects[linkcrawler]: the project has no spider nosuchspider" in proc.stdout
    # Every worker stopped there: no task of the roles ran on a host.
    counts = recap(proc.stdout)
    assert set(counts) == {"b", "c"} and all(c["failed"] == 1 for c in counts.values()), counts
    assert "TASK [crawlfleet_app : Copy the wheelhouse]" not in proc.stdout
    assert "TASK [crawler : " not in proc.stdout.split("Stop on a project that cannot run")[1]


def test_a_git_src_is_checked_out_at_its_version(build_dir: Path, tmp_path: Path) -> None:
    repo = tmp_path / "linkcrawler.git"
    shutil.copytree(EXAMPLE, repo)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.net"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "v1"], ["tag", "v1"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    url = f"file://{repo}"
    proc = check(build_dir, src=url, version="v1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["linkcrawler"]["spiders"] == ["pages"]
    assert "set version" in one_line(check(build_dir, src=url))
    assert "has no version v9" in one_line(check(build_dir, src=url, version="v9"))
