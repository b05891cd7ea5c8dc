"""Helpers of the ACL tests: a real `crawlfleet agent` (process runner, the classic test project)
logged in as the crawler user of the module's ``hub``, registered before the test goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from support.crawl import ROOT
from support.secureredis import SecureRedis
from support.services import log_tail, start_process, stop_process
from support.waiting import wait_until

from crawlfleet.jobs import store

PROJECT = ROOT / "tests" / "integration" / "frontier" / "classic_project"
SPIDER = "pages"  # the classic project's spider


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return {**base, "PYTHONPATH": str(ROOT / "project")}


@pytest.fixture
def start_agent(
    hub: SecureRedis, agent_watcher: redis.Redis, tmp_path: Path
) -> Iterator[Callable[[str], None]]:
    """``start(name)``: a real `crawlfleet agent` logged in as the crawler user, registered (as
    the module's ``agent_watcher`` client sees the agents)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> None:
        log = tmp_path / f"agent-{name}.log"
        argv = [
            sys.executable, "-m", "crawlfleet.cli", "agent", "--runner", "process",
            "--project", f"classic={PROJECT}", "--name", name, "--interval", "0.2",
            "--ttl", "3", "--stop-timeout", "20", "--log-dir", str(tmp_path / f"crawls-{name}"),
            "--redis-url", hub.url("crawler"),
        ]  # fmt: skip
        proc = start_process(argv, log, env=env(), cwd=tmp_path)
        started.append(proc)

        def registered() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"agent {name} exited:\n{log_tail(log)}")
            found = {a.name: a for a in store.agents(agent_watcher) if a.alive}.get(name)
            return found is not None and found.spiders.get(SPIDER) == "classic"

        wait_until(registered, f"agent {name} registered", timeout=60)

    yield start
    for proc in started:
        stop_process(proc, sig=signal.SIGTERM)
    agent_watcher.close()
