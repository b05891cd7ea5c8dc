"""A real `crawlfleet agent` for tests: the process runner with the frontier tests' classic
project (spider ``pages``), started on a Redis URL and waited on until it is registered and
alive. The job, ACL and operator tests all start their agents through ``launch_agent``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import redis

from crawlfleet.jobs import store
from support.crawl import ROOT
from support.services import log_tail, start_process, stop_process
from support.waiting import wait_or_stop

PROJECT = ROOT / "tests" / "integration" / "frontier" / "classic_project"
SPIDER = "pages"  # the classic project's spider
# Its liveness deadline is AGENT_TTL seconds ahead of each heartbeat.
AGENT_TTL = 3


@dataclass
class AgentProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return log_tail(self.log)

    def stop(self) -> None:
        stop_process(self.proc, sig=signal.SIGTERM)


def agent_env() -> dict[str, str]:
    """An agent's or the CLI's environment: no REDIS_URL of the caller, the project on the path."""
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return {**base, "PYTHONPATH": str(ROOT / "project")}


def launch_agent(
    redis_url: str, name: str, workdir: Path, watcher: redis.Redis, *extra: str
) -> AgentProcess:
    """Start `crawlfleet agent --name NAME` on ``redis_url`` (its log and crawls in ``workdir``)
    and wait until ``watcher`` (a client that may read the agents) sees it alive with the
    classic project's spider; an agent that exits first fails with its log."""
    log = workdir / f"agent-{name}.log"
    suffix = 1
    while log.exists():  # the same name started again in one test
        log, suffix = workdir / f"agent-{name}-{suffix}.log", suffix + 1
    argv = [
        sys.executable, "-m", "crawlfleet.cli", "agent", "--runner", "process",
        "--project", f"classic={PROJECT}", "--name", name, "--interval", "0.2",
        "--ttl", str(AGENT_TTL), "--stop-timeout", "20",
        "--log-dir", str(workdir / f"crawls-{name}"), "--redis-url", redis_url, *extra,
    ]  # fmt: skip
    agent = AgentProcess(name, start_process(argv, log, env=agent_env(), cwd=workdir), log)

    def registered() -> bool:
        if agent.proc.poll() is not None:
            raise AssertionError(f"agent {name} exited:\n{agent.tail()}")
        found = {a.name: a for a in store.agents(watcher) if a.alive}.get(name)
        return found is not None and found.spiders.get(SPIDER) == "classic"

    wait_or_stop(registered, f"agent {name} registered", 60, agent.stop)
    return agent
