"""Fixtures of the operator tests: ``run_agent``, a real `crawlfleet agent` for the alerts."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from support.agents import AgentProcess, launch_agent


@pytest.fixture
def run_agent(tmp_path: Path) -> Iterator[Callable[[str, str], subprocess.Popen[bytes]]]:
    """``run_agent(redis_url, name)``: a `crawlfleet agent` (process runner) registered and
    alive; whatever still runs at the end is stopped with SIGTERM."""
    started: list[AgentProcess] = []

    def run(redis_url: str, name: str) -> subprocess.Popen[bytes]:
        client = redis.Redis.from_url(redis_url)
        try:
            agent = launch_agent(redis_url, name, tmp_path, client)
        finally:
            client.close()
        started.append(agent)
        return agent.proc

    yield run
    for agent in started:
        agent.stop()
