"""Helpers of the job tests: real `crawlfleet agent` processes (process runner, the classic test
project) and the real `crawlfleet` CLI in a subprocess, as an operator runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from support.crawl import ROOT
from support.services import log_tail, start_process, stop_process
from support.waiting import wait_until

from crawlfleet.jobs import store

PROJECT = ROOT / "tests" / "integration" / "frontier" / "classic_project"
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


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return {**base, "PYTHONPATH": str(ROOT / "project")}


def cli(*args: str) -> Result:
    """``crawlfleet ARGS…`` in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class AgentProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return log_tail(self.log)

    def stop(self) -> None:
        stop_process(self.proc, sig=signal.SIGTERM)


def live_agents(client: redis.Redis) -> dict[str, store.Agent]:
    return {a.name: a for a in store.agents(client) if a.alive}


@pytest.fixture
def start_agent(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []
    client = redis.Redis.from_url(redis_url)

    def start(name: str, *extra: str) -> AgentProcess:
        log = tmp_path / f"agent-{name}.log"
        argv = [
            sys.executable,
            "-m",
            "crawlfleet.cli",
            "agent",
            "--runner",
            "process",
            "--project",
            f"classic={PROJECT}",
            "--name",
            name,
            "--interval",
            "0.2",
            "--ttl",
            "3",
            "--stop-timeout",
            "20",
            "--log-dir",
            str(tmp_path / f"crawls-{name}"),
            "--redis-url",
            redis_url,
            *extra,
        ]
        agent = AgentProcess(name, start_process(argv, log, env=env(), cwd=tmp_path), log)
        started.append(agent)

        def registered() -> bool:
            if agent.proc.poll() is not None:
                raise AssertionError(f"agent {name} exited:\n{agent.tail()}")
            found = live_agents(client).get(name)
            return found is not None and found.spiders.get("pages") == "classic"

        wait_until(registered, f"agent {name} registered", timeout=60)
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
