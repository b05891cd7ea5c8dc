"""No job stays "running" for ever (Crawlab #1446, #1300): an agent killed with SIGKILL is found
down by the hub's watchdog and the job ends `failed`, naming it; an agent that comes back in time
picks up the crawl processes it had started and the job ends `finished`. Real agents, real
crawls, real redis-server."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator

import pytest
import redis
from jobs_helpers import FAST, AgentProcess, cli, job, pids_alive, wait_state
from support.crawl import Site
from support.waiting import wait_until

from crawlfleet.jobs import store


@pytest.fixture
def orphans(redis_client: redis.Redis) -> Iterator[list[str]]:
    """Job ids whose crawl processes a killed agent left behind: killed at the end."""
    jobs: list[str] = []
    yield jobs
    for job_id in jobs:
        for pid in pids_alive(job(redis_client, job_id)):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def job_on_a_and_b(
    site: Site,
    redis_url: str,
    start_agent: Callable[..., AgentProcess],
    orphans: list[str],
) -> Callable[..., AgentProcess]:
    """Start the hub's agent a (scheduler and watchdog), agent b with these flags and job 1 on
    both (its crawl processes killed at the end if b leaves them behind); agent b."""

    def start(*b_flags: str) -> AgentProcess:
        start_agent("a", "--schedules")
        b = start_agent("b", *b_flags)
        started = cli(
            "job", "start", "classic", "pages", "-a", f"site={site.url}", "-a",
            f"pages={site.pages}", *FAST, "--redis-url", redis_url,
        )  # fmt: skip
        assert started.code == 0, started.err
        orphans.append("1")
        return b

    return start


def test_a_killed_agent_is_found_down_and_its_job_ends_failed(
    site: Site, redis_client: redis.Redis, job_on_a_and_b: Callable[..., AgentProcess]
) -> None:
    site.pages, site.delay = 40, 0.05
    b = job_on_a_and_b()
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(timeout=10)
    record = wait_state(redis_client, "1", "finished", "failed")
    assert record["state"] == "failed", record
    assert record["hosts"]["b"] == {
        "state": "lost",
        "error": "agent b is down",
        "pids": record["hosts"]["b"]["pids"],
    }
    assert "b: agent b is down" in record["error"]
    assert record["hosts"]["a"]["state"] == "exited"
    assert "stats" in record


def test_an_agent_back_in_time_picks_up_its_crawl(
    site: Site,
    redis_client: redis.Redis,
    start_agent: Callable[..., AgentProcess],
    job_on_a_and_b: Callable[..., AgentProcess],
) -> None:
    site.pages, site.delay = 60, 0.1
    b = job_on_a_and_b("--ttl", "60")  # time to come back before it counts as down
    wait_until(lambda: len(site.crawled()) >= 4, "the crawl under way", timeout=60)
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(timeout=10)
    assert job(redis_client, "1")["state"] == "running"
    start_agent("b", "--ttl", "60")  # within its --ttl: never found down
    record = wait_state(redis_client, "1", "finished", "failed")
    assert record["state"] == "finished", record
    assert record["hosts"]["b"]["state"] == "exited"
    assert record["hosts"]["b"]["codes"] == [None]  # not its child any more: no exit status
    assert site.crawled() == site.expected()
    assert record["stats"]["pages"] == 60


def test_an_agent_found_down_that_comes_back_takes_its_part_back(
    site: Site, redis_client: redis.Redis, job_on_a_and_b: Callable[..., AgentProcess]
) -> None:
    """Frozen past its deadline (SIGSTOP, like a host that stalls or loses the hub for a while)
    while its crawl runs on: the watchdog marks it lost, and once it is back its part runs again,
    so the job ends finished, with every page once."""
    site.pages, site.delay = 60, 0.1
    b = job_on_a_and_b()  # --ttl 3
    wait_until(lambda: len(site.crawled()) >= 4, "the crawl under way", timeout=60)
    b.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: job(redis_client, "1")["hosts"]["b"]["state"] == "lost",
            "the watchdog marked b lost",
            timeout=60,
        )
    finally:
        b.proc.send_signal(signal.SIGCONT)
    wait_until(
        lambda: job(redis_client, "1")["hosts"]["b"]["state"] == "running",
        "b took its part back",
        timeout=60,
    )
    record = wait_state(redis_client, "1", "finished", "failed")
    assert record["state"] == "finished", record
    assert (record["hosts"]["b"]["state"], record.get("error", "")) == ("exited", ""), record
    history = [(h["by"], h["action"]) for h in store.job_history(redis_client, "1")]
    assert ("agent b", "back") in history, history
    assert site.crawled() == site.expected()
