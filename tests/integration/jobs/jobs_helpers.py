"""Helpers of the job tests: real `crawlfleet agent` processes (support.agents: the process
runner, the classic test project) and the real `crawlfleet` CLI in a subprocess, as an operator
runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from support.agents import AgentProcess, agent_env, launch_agent
from support.waiting import wait_until

from crawlfleet.jobs import store

# Fast frontier and statistics for loopback crawls (-s of `job start`).
FAST = [
    "-s",
    "SCHEDULER_LEASE_TIMEOUT=3",
    "-s",
    "SCHEDULER_HEARTBEAT_INTERVAL=0.3",
    "-s",
    "WORKERSTATS_INTERVAL=0.3",
    "-s",
    "BLOOMFILTER_CAPACITY=100000",
    "-s",
    "CONCURRENT_REQUESTS=2",
]


@dataclass
class Result:
    code: int
    out: str
    err: str


def cli(*args: str) -> Result:
    """``crawlfleet ARGS…`` in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", *args],
        capture_output=True,
        text=True,
        env=agent_env(),
        timeout=120,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def live_agents(client: redis.Redis) -> dict[str, store.Agent]:
    return {a.name: a for a in store.agents(client) if a.alive}


@pytest.fixture
def start_agent(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    """``start(name, *flags)``: a registered agent on the test's Redis, stopped at the end."""
    started: list[AgentProcess] = []
    client = redis.Redis.from_url(redis_url)

    def start(name: str, *extra: str) -> AgentProcess:
        agent = launch_agent(redis_url, name, tmp_path, client, *extra)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()
    client.close()


def job(client: redis.Redis, job_id: str) -> dict[str, Any]:
    return store.get_job(client, job_id)


def wait_state(client: redis.Redis, job_id: str, *states: str, timeout: float = 90) -> dict:
    wait_until(
        lambda: job(client, job_id)["state"] in states,
        f"job {job_id} {'/'.join(states)}",
        timeout=timeout,
        interval=0.1,
    )
    return job(client, job_id)


def pids_alive(record: dict[str, Any]) -> list[int]:
    alive = []
    for host in record["hosts"].values():
        for pid in host.get("pids", []):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            alive.append(pid)
    return alive
