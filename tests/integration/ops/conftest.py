"""Fixtures of the operator tests: ``run_agent``, a real `crawlfleet agent` for the alerts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from ops_helpers import ROOT
from support.services import log_tail, start_process, stop_process
from support.waiting import wait_until

from crawlfleet.jobs import store

# The process runner needs a Scrapy project; the frontier tests' classic one has spider `pages`.
PROJECT = ROOT / "tests" / "integration" / "frontier" / "classic_project"
# Its liveness deadline is AGENT_TTL seconds ahead of each heartbeat (as in the job tests).
AGENT_TTL = 3


@pytest.fixture
def run_agent(tmp_path: Path) -> Iterator[Callable[[str, str], subprocess.Popen[bytes]]]:
    """``run_agent(redis_url, name)``: a `crawlfleet agent` (process runner) registered and
    alive; whatever still runs at the end is stopped with SIGTERM."""
    started: list[subprocess.Popen[bytes]] = []

    def run(redis_url: str, name: str) -> subprocess.Popen[bytes]:
        log = tmp_path / f"agent-{name}-{len(started)}.log"
        argv = [
            sys.executable, "-m", "crawlfleet.cli", "agent", "--runner", "process",
            "--project", f"classic={PROJECT}", "--name", name, "--interval", "0.2",
            "--ttl", str(AGENT_TTL), "--log-dir", str(tmp_path / f"crawls-{name}"),
            "--redis-url", redis_url,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env["PYTHONPATH"] = str(ROOT / "project")
        proc = start_process(argv, log, env=env, cwd=tmp_path)
        started.append(proc)
        client = redis.Redis.from_url(redis_url)

        def alive() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"agent {name} exited:\n{log_tail(log)}")
            return any(a.name == name and a.alive for a in store.agents(client))

        try:
            wait_until(alive, f"agent {name} registered", timeout=60)
        finally:
            client.close()
        return proc

    yield run
    for proc in started:
        stop_process(proc)
