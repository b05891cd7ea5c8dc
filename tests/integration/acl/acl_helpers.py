"""Helpers of the ACL tests: a real `crawlfleet agent` (process runner, the classic test project)
logged in as the crawler user of the module's ``hub``, registered before the test goes on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from support.agents import SPIDER, AgentProcess, launch_agent
from support.agents import agent_env as env
from support.secureredis import SecureRedis

__all__ = ["SPIDER", "env", "start_agent"]


@pytest.fixture
def start_agent(
    hub: SecureRedis, agent_watcher: redis.Redis, tmp_path: Path
) -> Iterator[Callable[[str], None]]:
    """``start(name)``: a real `crawlfleet agent` logged in as the crawler user, registered (as
    the module's ``agent_watcher`` client sees the agents)."""
    started: list[AgentProcess] = []

    def start(name: str) -> None:
        started.append(launch_agent(hub.url("crawler"), name, tmp_path, agent_watcher))

    yield start
    for agent in started:
        agent.stop()
    agent_watcher.close()
