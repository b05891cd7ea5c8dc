"""The job and schedule command lines and the agent's settings: what they accept, and one line
for what they refuse (no Redis needed: all of it is checked before connecting)."""

from __future__ import annotations

import argparse

import pytest

from crawlfleet.cli import build_parser
from crawlfleet.commands.job import pair, workers_count
from crawlfleet.jobs import agent


def test_spider_arguments_and_settings_are_name_value_pairs() -> None:
    assert pair("-a")("site=http://x/?a=b") == ("site", "http://x/?a=b")
    assert pair("-s")("EMPTY=") == ("EMPTY", "")
    for bad in ("site", "=x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=r"^-a takes NAME=VALUE, got "):
            pair("-a")(bad)


def test_workers_is_a_count_or_all() -> None:
    assert (workers_count("2"), workers_count("all"), workers_count("ALL")) == (2, None, None)
    for bad in ("0", "-1", "two", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=r"^must be a number >= 1 or all"):
            workers_count(bad)


def test_job_start_takes_positionals_and_flags_in_any_order() -> None:
    args = build_parser().parse_args(
        ["job", "start", "-a", "x=1", "proj", "-s", "K=V", "spider", "--workers", "3"]
    )
    assert (args.project, args.spider, args.args, args.settings, args.workers) == (
        "proj",
        "spider",
        [("x", "1")],
        [("K", "V")],
        3,
    )


def test_a_schedule_has_cron_or_every_and_one_dupefilter_choice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parse = build_parser().parse_args
    assert parse(["schedule", "add", "p", "s", "--every", "6h"]).dupefilter == "fresh"
    kept = parse(["schedule", "add", "p", "s", "--cron", "0 3 * * *", "--keep-dupefilter"])
    assert kept.dupefilter == "keep"
    for argv in (
        ["schedule", "add", "p", "s"],
        ["schedule", "add", "p", "s", "--every", "6h", "--cron", "0 3 * * *"],
        ["schedule", "add", "p", "s", "--every", "6h", "--fresh-dupefilter", "--keep-dupefilter"],
    ):
        with pytest.raises(SystemExit) as excinfo:
            parse(argv)
        assert excinfo.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runner", "process"], "--project/AGENT_PROJECTS: the process runner needs"),
        (["--runner", "cron"], "--runner/AGENT_RUNNER must be one of systemd, process"),
        (["--runner", "process", "--project", "x"], "AGENT_PROJECTS item 'x' must be NAME=DIR"),
        (["--runner", "process", "--project", "x=/no/such"], "'/no/such' is not a directory"),
        (["--interval", "0"], "--interval/AGENT_INTERVAL must be >= 0.05"),
        (["--job-history", "0"], "--job-history/AGENT_JOB_HISTORY must be an integer between 1"),
    ],
)
def test_bad_agent_settings_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert agent.main([*argv, "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("crawlfleet agent: error: ") and message in err[0]
