"""The last log lines of a crawler unit (the dashboard's and `job logs`' source): the process
runner's log file read from its end, `journalctl` within the job's times for systemd units (a
small script stands in for journalctl and records its arguments), passwords in URLs masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawlfleet.jobs.runners import (
    LINE_CHARS,
    TAIL_BYTES,
    ProcessRunner,
    RunnerError,
    SystemdRunner,
    tail_file,
)

JOURNALCTL = """#!/bin/sh
echo "$*" >> {calls}
[ -e {fail} ] && {{ echo "Failed to add filter for units: No data available" >&2; exit 1; }}
# A journal of 5 lines, as systemd 252 answers with --since: -n keeps the first N lines after it,
# --reverse the newest N, newest first.
n=5; rev=0; prev=""
for a in "$@"; do [ "$prev" = "-n" ] && n=$a; [ "$a" = "--reverse" ] && rev=1; prev=$a; done
if [ $rev = 1 ]; then seq 5 -1 1; else seq 1 5; fi | head -n "$n" |
  while read -r i; do echo "line $i redis://crawler:s3cret@hub:6379/0"; done
"""


def test_a_process_units_log_is_read_from_its_end(tmp_path: Path) -> None:
    runner = ProcessRunner(projects={}, log_dir=tmp_path)
    log = tmp_path / "job-7-pages-1.log"
    log.write_text("".join(f"line {n}\n" for n in range(1, 1001)))
    assert runner.tail("7", "pages-1", 3, (0, 0)) == ["line 998", "line 999", "line 1000"]
    with pytest.raises(RunnerError, match=r"job-8-pages-1\.log does not exist"):
        runner.tail("8", "pages-1", 3, (0, 0))


def test_a_huge_log_costs_its_last_bytes_and_long_lines_are_cut(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"x" * (TAIL_BYTES * 2) + b"\n" + b"y" * (LINE_CHARS * 3) + b"\nlast\n")
    lines = tail_file(log, 10)
    assert lines == ["y" * LINE_CHARS, "last"]  # the partial first line read is dropped


def test_passwords_in_logged_urls_are_masked(tmp_path: Path) -> None:
    log = tmp_path / "job-1-pages-1.log"
    log.write_text(
        "REDIS_URL rediss://:pw@hub:6380/0 and http://u:p@proxy:8080/ and http://plain/\n"
    )
    (line,) = ProcessRunner(projects={}, log_dir=tmp_path).tail("1", "pages-1", 5, (0, 0))
    assert (
        line == "REDIS_URL rediss://:***@hub:6380/0 and http://u:***@proxy:8080/ and http://plain/"
    )


@pytest.fixture
def systemd(tmp_path: Path) -> SystemdRunner:
    script = tmp_path / "journalctl"
    script.write_text(JOURNALCTL.format(calls=tmp_path / "calls", fail=tmp_path / "fail"))
    script.chmod(0o755)
    return SystemdRunner(spiders_dir=tmp_path, run_dir=tmp_path / "run", journalctl=str(script))


def test_a_systemd_unit_is_read_with_journalctl_within_the_jobs_times(
    systemd: SystemdRunner, tmp_path: Path
) -> None:
    lines = systemd.tail("7", "crawler@pages-1", 2, (1_700_000_000_500, 1_700_000_100_000))
    assert lines == [
        "line 4 redis://crawler:***@hub:6379/0",
        "line 5 redis://crawler:***@hub:6379/0",
    ]
    running = systemd.tail("8", "crawler@pages-2", 50, (1_700_000_000_500, 0))
    assert running == [f"line {n} redis://crawler:***@hub:6379/0" for n in range(1, 6)]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [
        "-u crawler@pages-1 -n 2 --reverse --no-pager -o short-iso --since @1700000000"
        " --until @1700000101",
        "-u crawler@pages-2 -n 50 --reverse --no-pager -o short-iso --since @1700000000",
    ]


def test_journalctl_failing_or_a_unit_that_is_not_a_crawlers_is_one_line(
    systemd: SystemdRunner, tmp_path: Path
) -> None:
    with pytest.raises(RunnerError, match="'sshd' is not a crawler unit"):
        systemd.tail("7", "sshd", 5, (0, 0))
    (tmp_path / "fail").touch()
    with pytest.raises(RunnerError, match="journalctl -u crawler@pages-1 failed: Failed to add"):
        systemd.tail("7", "crawler@pages-1", 5, (0, 0))
