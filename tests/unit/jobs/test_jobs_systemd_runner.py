"""The systemd runner's side of the contract with the crawler role: which spiders it finds in the
role's environment files, which units it starts, what it writes for the launcher, and how a failed
`systemctl start` reads. `systemctl` is a small script here that records its arguments and answers
like systemd; the real units are the lab's."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from crawlfleet.jobs.runners import Launch, RunnerError, SystemdRunner, read_env_file

SYSTEMCTL = """#!/bin/sh
echo "$*" >> {calls}
case "$1" in
  start) [ -e {fail} ] && {{ echo "Job for $2.service failed." >&2; exit 1; }}; exit 0 ;;
  show) case "$2" in --property=MainPID) echo 4242 ;; *) echo 3 ;; esac ;;
  is-active) echo inactive; exit 3 ;;
esac
"""


@pytest.fixture
def runner(tmp_path: Path) -> SystemdRunner:
    spiders = tmp_path / "spiders"
    spiders.mkdir()
    (spiders / "pages.env").write_text(
        "# crawler@pages-N\nCRAWLFLEET_PROJECT='linkcrawler'\nCRAWLFLEET_PROCESSES='2'\n"
    )
    (spiders / "book.env").write_text("CRAWLFLEET_PROJECT='bookcrawler'\n")
    (spiders / "notes.txt").write_text("not an environment file\n")
    script = tmp_path / "systemctl"
    script.write_text(SYSTEMCTL.format(calls=tmp_path / "calls", fail=tmp_path / "fail"))
    script.chmod(0o755)
    return SystemdRunner(spiders_dir=spiders, run_dir=tmp_path / "run", systemctl=str(script))


def calls(runner: SystemdRunner) -> list[str]:
    return (runner.spiders_dir.parent / "calls").read_text().splitlines()


def test_the_spiders_are_the_roles_environment_files(runner: SystemdRunner) -> None:
    assert runner.installed() == {"book": "bookcrawler", "pages": "linkcrawler"}
    assert read_env_file(runner.spiders_dir / "pages.env")["CRAWLFLEET_PROCESSES"] == "2"


def test_a_start_writes_the_job_for_the_launcher_and_starts_every_unit(
    runner: SystemdRunner,
) -> None:
    launch = Launch("7", "linkcrawler", "pages", [("depth", "2 levels")], [("K", "V")])
    units = runner.start(launch)
    assert units == [
        {"name": "crawler@pages-1", "pid": 4242},
        {"name": "crawler@pages-2", "pid": 4242},
    ]
    assert calls(runner)[0] == "start crawler@pages-1 crawler@pages-2"
    job = read_env_file(runner.run_dir / "pages.job.env")
    assert job["CRAWLFLEET_JOB"] == "7"
    assert shlex.split(job["CRAWLFLEET_CRAWL_ARGS"]) == ["-a", "depth=2 levels", "-s", "K=V"]
    assert runner.running(units[0]) == (False, 3)
    runner.stop(units)
    assert calls(runner)[-1] == "stop crawler@pages-1 crawler@pages-2"
    assert not (runner.run_dir / "pages.job.env").exists()
    assert runner.start(Launch("8", "bookcrawler", "book"))[0]["name"] == "crawler@book-1"


def test_a_failed_start_is_one_line_and_stops_what_it_started(runner: SystemdRunner) -> None:
    (runner.spiders_dir.parent / "fail").touch()
    with pytest.raises(RunnerError) as excinfo:
        runner.start(Launch("7", "linkcrawler", "pages"))
    assert str(excinfo.value) == (
        "systemctl start crawler@pages-1 crawler@pages-2 failed: "
        "Job for crawler@pages-1.service failed."
    )
    assert calls(runner)[-1] == "stop crawler@pages-1 crawler@pages-2"
    with pytest.raises(RunnerError, match=r"^spider 'nope' is not installed here"):
        runner.start(Launch("7", "linkcrawler", "nope"))
