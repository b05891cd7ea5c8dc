"""Bad input to `crawlfleet job` and `crawlfleet schedule`: one line each, or an idempotent no-op,
and never a half-started job (real agents, real redis-server, the real CLI)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

import redis
from jobs_helpers import FAST, AgentProcess, agent_env, cli, job, live_agents, pids_alive
from support.crawl import Site
from support.services import log_tail, start_process, stop_process
from support.waiting import wait_until

from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.jobs import store


def _one_line_error(result: object, code: int, text: str) -> None:
    """One line naming the problem (after argparse's usage, for a flag argparse refused)."""
    assert result.code == code, (result.out, result.err)  # type: ignore[attr-defined]
    lines = result.err.strip().splitlines()  # type: ignore[attr-defined]
    if lines[0].startswith("usage: "):
        lines = lines[-1:]
    assert len(lines) == 1 and text in lines[0], lines
    assert result.out == ""  # type: ignore[attr-defined]


def test_without_any_agent_a_start_is_refused(redis_url: str, redis_client: redis.Redis) -> None:
    result = cli("job", "start", "classic", "pages", "--redis-url", redis_url)
    _one_line_error(result, 1, "crawlfleet job: error: no agent has registered a project yet")
    assert redis_client.exists(JobKeys().jobs) == 0


def test_unknown_names_ids_and_flags_are_one_line_and_start_nothing(
    redis_url: str, redis_client: redis.Redis, start_agent: Callable[..., AgentProcess]
) -> None:
    start_agent("a")
    url = ("--redis-url", redis_url)
    cases = [
        (("job", "start", "nope", "pages"), 1, "unknown project 'nope' (known: classic)"),
        (("job", "start", "classic", "books"), 1, "project 'classic' has no spider 'books' "),
        (("job", "start", "classic", "crawlfleet"), 1, "no spider may be named 'crawlfleet'"),
        (("job", "start", "classic", "pa*"), 2, "not a spider name: 'pa*'"),
        (("job", "start", "classic", "pages", "-a", "site"), 2, "-a takes NAME=VALUE"),
        (("job", "start", "classic", "pages", "--workers", "0"), 2, "must be a number >= 1 or"),
        (("job", "show", "99"), 1, "crawlfleet job: error: no job '99'"),
        (("job", "stop", "99"), 1, "no job '99'"),
        (("job", "pause", "99"), 1, "no job '99'"),
        (("job", "resume", "99"), 1, "no job '99'"),
        (("schedule", "add", "classic", "pages", "--cron", "61 * * * *"), 2,
         "--cron '61 * * * *' does not parse: Bad minute"),
        (("schedule", "add", "classic", "pages", "--cron", "0 3 * *"), 2, "must have five fields"),
        (("schedule", "add", "classic", "pages", "--every", "6x"), 2, "--every '6x' is not a"),
        (("schedule", "add", "classic", "pages", "--every", "0s"), 2, "must be between"),
        (("schedule", "add", "nope", "pages", "--every", "6h"), 1, "unknown project 'nope'"),
        (("schedule", "remove", "9"), 1, "no schedule '9'"),
        (("schedule", "pause", "9"), 1, "no schedule '9'"),
    ]  # fmt: skip
    for args, code, text in cases:
        _one_line_error(cli(*args, *url), code, text)
    assert redis_client.exists(JobKeys().jobs, JobKeys().schedules) == 0


def test_a_start_on_workers_that_are_down_is_refused_before_anything_starts(
    redis_url: str, redis_client: redis.Redis, start_agent: Callable[..., AgentProcess]
) -> None:
    start_agent("a")
    start_agent("b").stop()  # a stopped agent is down at once
    assert set(live_agents(redis_client)) == {"a"}
    result = cli("job", "start", "classic", "pages", "--workers", "2", "--redis-url", redis_url)
    _one_line_error(
        result, 1, "pages needs 2 live worker(s), 1 live (a; down: b); nothing was started"
    )
    assert redis_client.exists(JobKeys().jobs, JobKeys().commands("a")) == 0


def test_an_agent_that_does_not_answer_fails_the_start_and_nothing_keeps_running(
    site: Site,
    redis_url: str,
    redis_client: redis.Redis,
    start_agent: Callable[..., AgentProcess],
) -> None:
    site.pages = 200
    start_agent("a")
    # Registered and within its deadline, but no process behind it (it hangs, or just died).
    info = {"host": "ghost", "pid": 1, "runner": "process", "spiders": {"pages": "classic"}}
    store.register_agent(redis_client, "ghost", info, 60_000, {})
    result = cli(
        "job", "start", "classic", "pages", "-a", f"site={site.url}", "-a", "pages=200", *FAST,
        "--timeout", "3", "--redis-url", redis_url,
    )  # fmt: skip
    assert result.code == 1, result.err
    assert result.out.strip() == (
        "job 1 failed to start, nothing runs: agent ghost did not answer in 3s"
    )
    record = job(redis_client, "1")
    assert record["state"] == "failed" and record["error"] == "agent ghost did not answer in 3s"
    assert record["hosts"]["a"]["state"] == "stopped"
    assert record["hosts"]["ghost"]["state"] == "failed"
    assert pids_alive(record) == []
    assert redis_client.sismember(JobKeys().jobs_active, "1") == 0


def test_a_crawl_that_fails_at_start_ends_the_job_failed(
    site: Site,
    redis_url: str,
    redis_client: redis.Redis,
    start_agent: Callable[..., AgentProcess],
) -> None:
    """crawlab #1446: a start that fails is visible, the job does not stay "running"."""
    start_agent("a")
    result = cli(
        "job", "start", "classic", "pages", "-a", f"site={site.url}", "-a", "pages=many",
        "--redis-url", redis_url,
    )  # fmt: skip
    assert result.code in (0, 1), result.err
    wait_until(lambda: job(redis_client, "1")["state"] == "failed", "the job failed", timeout=60)
    record = job(redis_client, "1")
    assert "agent a" in record["error"] and "exited with 1" in record["error"], record
    assert pids_alive(record) == []


def test_the_hubs_scheduler_agent_starts_nothing_and_needs_schedules(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``--runner none`` (the hub's scheduler agent): it registers, with no spider, so a job is
    never sent to it; without ``--schedules`` it is a configuration error, one line."""
    plain = cli("agent", "--runner", "none", "--redis-url", redis_url)
    _one_line_error(plain, 2, "--runner none: an agent that starts nothing needs --schedules")
    argv = [sys.executable, "-m", "crawlfleet.cli", "agent", "--runner", "none", "--schedules",
            "--name", "hub", "--interval", "0.2", "--ttl", "3",
            "--redis-url", redis_url]  # fmt: skip
    proc = start_process(argv, tmp_path / "hub.log", env=agent_env(), cwd=tmp_path)
    try:
        wait_until(lambda: "hub" in live_agents(redis_client), "the hub's agent registered")
        hub = live_agents(redis_client)["hub"]
        assert (hub.runner, hub.spiders) == ("none", {})
        result = cli("job", "start", "classic", "pages", "--redis-url", redis_url)
        _one_line_error(result, 1, "crawlfleet job: error: no agent has registered a project yet")
        assert redis_client.exists(JobKeys().jobs) == 0
    finally:
        stop_process(proc, sig=signal.SIGTERM)
    assert proc.returncode == 0, log_tail(tmp_path / "hub.log")
