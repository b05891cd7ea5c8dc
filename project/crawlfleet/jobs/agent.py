"""``crawlfleet agent``: the per-host service that starts and stops a job's crawler units.

It opens no port: it talks to the hub's Redis with the crawler's credentials (``REDIS_URL``). Every
``--interval`` it registers what is installed on its host (spider → project) with a liveness
deadline ``--ttl`` ahead, takes the commands queued for it (``start``, ``stop`` of a job), answers
each (so a start that fails is known at once), watches the units it started and reports when they
end; the last worker of a job to end writes the job's end and its numbers. With ``--schedules``
(on the hub) it also runs the scheduler and the watchdog that marks the workers of a down agent
``lost``, so no job stays ``running`` for ever.

Runners (``--runner``): ``systemd`` (the crawler role's ``crawler@<spider>-<n>`` units),
``process`` (``scrapy crawl`` processes of ``--project NAME=DIR``; they end with the agent) and
``none`` (the hub's scheduler agent: it starts nothing and registers no spider).

Exit status (``crawlfleet.service.options``): 0 after SIGTERM/SIGINT, 2 on bad configuration, 1
when Redis cannot be reached at start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis

from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.errors import RedisConfigError
from crawlfleet.hub.urls import mask_url
from crawlfleet.jobs import control, store
from crawlfleet.jobs.runners import (
    Launch,
    NoRunner,
    ProcessRunner,
    Runner,
    RunnerError,
    SystemdRunner,
)
from crawlfleet.jobs.schedules import ScheduleRunner
from crawlfleet.jobs.store import job_keys
from crawlfleet.service import logs, options, runtime
from crawlfleet.service.logs import event
from crawlfleet.service.options import ConfigError, Option, ServiceFailure, choice, integer, number

PROG = "crawlfleet agent"
log = logging.getLogger("crawlfleet.agent")
REDIS_PARAMS = {"socket_timeout": 30, "socket_connect_timeout": 5, "health_check_interval": 30}
# A job still pending this long after it was created lost its starter (a killed CLI).
PENDING_LIMIT_MS = 600_000
T = TypeVar("T")


def project_dir(raw: str) -> tuple[str, str]:
    name, sep, directory = raw.partition("=")
    if not sep or not name.strip() or not directory.strip():
        raise ValueError("must be NAME=DIR")
    if not Path(directory.strip()).is_dir():
        raise ValueError(f"{directory.strip()!r} is not a directory")
    return name.strip(), directory.strip()


OPTIONS: tuple[Option, ...] = (
    options.redis_url_option("the hub's Redis, with the crawler's credentials"),
    Option(
        "name",
        "--name",
        "AGENT_NAME",
        "",
        "this agent's name in jobs and `--workers` (default: the host name)",
        options.optional_text,
    ),
    Option(
        "runner",
        "--runner",
        "AGENT_RUNNER",
        "systemd",
        "how crawler units start: systemd (crawler@<spider>-<n>), process (scrapy crawl) or "
        "none (the hub's scheduler: starts nothing, with --schedules)",
        choice("systemd", "process", "none"),
    ),
    Option(
        "projects",
        "--project",
        "AGENT_PROJECTS",
        (),
        "process runner: a project as NAME=DIR (the directory holding scrapy.cfg)",
        options.items(project_dir),
        kind="list",
        metavar="NAME=DIR",
    ),
    Option(
        "processes",
        "--processes",
        "AGENT_PROCESSES",
        1,
        "crawler processes per job on this host (systemd: unless the spider's environment "
        "file sets CRAWLFLEET_PROCESSES)",
        integer(1, 256),
    ),
    Option(
        "spiders_dir",
        "--spiders-dir",
        "AGENT_SPIDERS_DIR",
        "/etc/crawlfleet/spiders",
        "systemd runner: the crawler role's spider environment files",
        options.text,
        metavar="DIR",
    ),
    Option(
        "run_dir",
        "--run-dir",
        "AGENT_RUN_DIR",
        "/run/crawlfleet/jobs",
        "systemd runner: where a job's arguments are written for the crawler launcher",
        options.text,
        metavar="DIR",
    ),
    Option(
        "log_dir",
        "--log-dir",
        "AGENT_LOG_DIR",
        "",
        "process runner: crawl logs (default: crawlfleet-agent in the temporary directory)",
        options.optional_text,
        metavar="DIR",
    ),
    Option(
        "interval",
        "--interval",
        "AGENT_INTERVAL",
        1.0,
        "seconds between heartbeats and checks of the units; commands are taken at once",
        number(0.05, 60, unit=" seconds"),
    ),
    Option(
        "ttl",
        "--ttl",
        "AGENT_TTL",
        10.0,
        "seconds after its last heartbeat an agent counts as down",
        number(1, 3600, unit=" seconds"),
    ),
    Option(
        "stop_timeout",
        "--stop-timeout",
        "AGENT_STOP_TIMEOUT",
        120.0,
        "seconds a unit has to stop after SIGTERM before SIGKILL",
        number(1, 3600, unit=" seconds"),
    ),
    Option(
        "schedules",
        "--schedules",
        "AGENT_SCHEDULES",
        False,
        "run the scheduler and the jobs' watchdog here (on the hub's agent)",
        options.boolean,
        kind="switch",
    ),
    Option(
        "start_timeout",
        "--start-timeout",
        "AGENT_START_TIMEOUT",
        30.0,
        "scheduler: seconds the agents have to answer a scheduled start",
        number(1, 3600, unit=" seconds"),
    ),
    Option(
        "job_history",
        "--job-history",
        "AGENT_JOB_HISTORY",
        1000,
        "ended job records kept (the oldest beyond are deleted)",
        integer(1, 1_000_000),
    ),
    Option(
        "log_level",
        "--log-level",
        "AGENT_LOG_LEVEL",
        "info",
        "debug, info, warning or error (key=value lines on stderr)",
        choice("debug", "info", "warning", "error"),
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Start and stop the crawler units of jobs on this host."
    )
    options.add_arguments(parser, OPTIONS)
    return parser


def make_runner(values: Mapping[str, Any]) -> Runner:
    if values["runner"] == "none":
        if not values["schedules"]:
            raise ConfigError("--runner none: an agent that starts nothing needs --schedules")
        return NoRunner()
    if values["runner"] == "process":
        if not values["projects"]:
            raise ConfigError("--project/AGENT_PROJECTS: the process runner needs a NAME=DIR")
        log_dir = values["log_dir"] or os.path.join(tempfile.gettempdir(), "crawlfleet-agent")
        return ProcessRunner(
            projects={name: Path(d) for name, d in values["projects"]},
            environment={"REDIS_URL": values["redis_url"]},
            processes=values["processes"],
            log_dir=Path(log_dir),
            stop_timeout=values["stop_timeout"],
        )
    return SystemdRunner(
        spiders_dir=Path(values["spiders_dir"]),
        run_dir=Path(values["run_dir"]),
        processes=values["processes"],
        stop_timeout=values["stop_timeout"],
    )


@dataclass
class Agent:
    """One agent: its runner, the units it runs (job id → units) and its Redis client."""

    client: redis.Redis
    name: str
    runner: Runner
    interval: float
    ttl: float
    job_history: int
    spiders: dict[str, str] = field(default_factory=dict)
    units: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    host: str = field(default_factory=socket.gethostname)
    # Commands and the unit checks run in two threads: one at a time touches ``units``.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def info(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": os.getpid(),
            "runner": self.runner.name,
            "spiders": self.spiders,
        }

    def heartbeat(self) -> None:
        store.register_agent(self.client, self.name, self.info(), int(self.ttl * 1000), self.units)

    def restore(self) -> None:
        """Pick up the units an earlier run of this agent left running."""
        for job_id, units in store.agent_units(self.client, self.name).items():
            if isinstance(units, list) and units:
                self.units[str(job_id)] = units

    # -- commands

    def take_command(self) -> bool:
        """Wait up to ``interval`` for one command and carry it out; True if there was one."""
        got = self.client.blpop([job_keys(self.client).commands(self.name)], timeout=self.interval)
        if got is None:
            return False
        try:
            command = json.loads(got[1])
            command_id, action, job_id = command["id"], command["action"], str(command["job"])
            lines = int(command.get("lines", control.LOG_LINES))
        except (ValueError, KeyError, TypeError, AttributeError):
            event(log, "bad_command", logging.WARNING, raw=repr(got[1])[:200])
            return True
        with self.lock:
            if action == "start":
                reply = self.start(job_id)
            elif action == "stop":
                reply = self.stop(job_id)
            elif action == "logs":
                reply = self.logs(job_id, lines)
            else:
                reply = {"ok": False, "error": f"agent {self.name}: unknown action {action!r}"}
        control.answer(self.client, command_id, **reply)
        return True

    def start(self, job_id: str) -> dict[str, Any]:
        try:
            job = store.get_job(self.client, job_id)
            if job_id in self.units:
                return {"ok": True, "units": self.units[job_id]}
            launch = Launch(
                job=job_id,
                project=job["project"],
                spider=job["spider"],
                args=[tuple(a) for a in job.get("args", [])],
                settings=[tuple(s) for s in job.get("settings", [])],
            )
            units = self.runner.start(launch)
        except (RunnerError, store.JobError, OSError) as exc:
            error = f"agent {self.name}: {exc}"
            event(log, "start_failed", logging.WARNING, job=job_id, error=error)
            return {"ok": False, "error": error}
        self.units[job_id] = units
        self._report(job_id, units, state="running")
        self.heartbeat()
        event(log, "started", job=job_id, spider=job["spider"], units=len(units))
        return {"ok": True, "units": units}

    def stop(self, job_id: str) -> dict[str, Any]:
        units = self.units.pop(job_id, [])
        if units:
            self.runner.stop(units)
            self._report(job_id, units, state="stopped")
            self.heartbeat()
            event(log, "stopped", job=job_id, units=len(units))
            self._finalize(job_id)
        return {"ok": True, "units": units}

    def logs(self, job_id: str, lines: int) -> dict[str, Any]:
        """The last ``lines`` lines of each of the job's units here (running or ended)."""
        try:
            job = store.get_job(self.client, job_id)
        except store.JobError as exc:
            return {"ok": False, "error": f"agent {self.name}: {exc}"}
        running = [str(u["name"]) for u in self.units.get(job_id, [])]
        names = running or list(job["hosts"].get(self.name, {}).get("units", []))
        window = (int(job.get("started") or job.get("created") or 0), int(job.get("ended") or 0))
        wanted = max(1, min(control.MAX_LOG_LINES, lines))
        units = {}
        for name in names:
            try:
                units[name] = self.runner.tail(job_id, str(name), wanted, window)
            except (RunnerError, OSError) as exc:
                units[name] = [f"(no log: {exc})"]
        return {"ok": True, "units": units}

    # -- watching the units

    def supervise(self) -> None:
        """Report the jobs whose units have all ended."""
        for job_id, units in list(self.units.items()):
            states = [self.runner.running(u) for u in units]
            if any(alive for alive, _ in states):
                self._back(job_id, units)
                continue
            codes = [code for _, code in states]
            bad = [c for c in codes if c not in (0, None)]
            self.units.pop(job_id)
            self.runner.ended(units)
            self._report(
                job_id,
                units,
                state="failed" if bad else "exited",
                codes=codes,
                error=f"agent {self.name}: crawl exited with {bad[0]}" if bad else "",
            )
            event(log, "units_ended", job=job_id, codes=codes)
            self._finalize(job_id)

    def _report(self, job_id: str, units: Sequence[Mapping[str, Any]], **state: Any) -> None:
        """Record this agent's part of the job: its ``state``, units and their pids."""
        store.set_host(
            self.client,
            job_id,
            self.name,
            **state,
            units=[u["name"] for u in units],
            pids=[u["pid"] for u in units],
        )

    def _back(self, job_id: str, units: list[dict[str, Any]]) -> None:
        """Back after the watchdog marked this agent's part of the job ``lost`` (it was frozen or
        cut off from the hub) while its units ran on: that part is ``running`` again, so the job
        does not end ``failed`` for a worker that came back."""
        key = job_keys(self.client).job(job_id)
        state, raw = self.client.hmget(key, ["state", f"host:{self.name}"])
        if isinstance(state, bytes):
            state = state.decode()
        if state not in ("running", "paused", "stopping") or raw is None:
            return
        try:
            if json.loads(raw).get("state") != "lost":
                return
        except ValueError:
            return
        self._report(job_id, units, state="running")
        store.record_history(
            self.client, job_id, f"agent {self.name}", "back", "its units ran on while it was away"
        )
        event(log, "back", logging.WARNING, job=job_id, units=len(units))

    def _finalize(self, job_id: str) -> None:
        state = store.finalize(self.client, job_id, control.agent_hosts(self.client))
        if state:
            event(log, "job_ended", job=job_id, state=state)

    def cycle(self) -> None:
        with self.lock:
            self.supervise()
            self.heartbeat()
        store.trim_history(self.client, self.job_history)

    def shutdown(self) -> None:
        """Down at once; a process runner's crawls end with it (systemd units go on)."""
        if isinstance(self.runner, ProcessRunner):
            with self.lock:
                for job_id in list(self.units):
                    self.stop(job_id)
        store.unregister_agent(self.client, self.name)


def watchdog(client: redis.Redis) -> list[str]:
    """Mark the workers of down agents ``lost`` and end the jobs that have nothing left running;
    fail jobs whose start never completed."""
    now = store.now_ms(client)
    found = {a.name: a for a in store.agents(client)}
    hosts = {a.name: a.host for a in found.values()}
    said = []
    for job in store.active_jobs(client):
        job_id = str(job["id"])
        if job.get("state") == "pending":
            if now - int(job.get("created") or now) > PENDING_LIMIT_MS:
                changed, _ = store.transition(
                    client,
                    job_id,
                    ["pending"],
                    "failed",
                    ended=now,
                    error="the start never completed (the starting command was interrupted)",
                )
                if changed:
                    client.srem(job_keys(client).jobs_active, job_id)
                    said.append(f"job {job_id}: failed (start never completed)")
            continue
        for worker in job.get("workers", []):
            state = job["hosts"].get(worker, {}).get("state")
            agent = found.get(worker)
            if state not in store.HOST_ENDS and (agent is None or not agent.alive):
                store.set_host(
                    client,
                    job_id,
                    worker,
                    state="lost",
                    error=f"agent {worker} is down",
                    pids=job["hosts"].get(worker, {}).get("pids", []),
                )
                said.append(f"job {job_id}: agent {worker} lost")
        ended = store.finalize(client, job_id, hosts)
        if ended:
            said.append(f"job {job_id}: {ended}")
    return said


async def serve(agent: Agent, scheduler: ScheduleRunner | None, interval: float) -> int:
    stop = asyncio.Event()
    runtime.on_stop_signals(stop, log)

    async def guarded(what: str, work: Callable[[], T], failed: T) -> T:
        """``work()`` in a thread; a Redis outage is logged and waited out (``failed`` is what
        it gives then), never fatal."""
        try:
            return await asyncio.to_thread(work)
        except (redis.RedisError, OSError) as exc:
            event(log, "redis_failed", logging.WARNING, during=what, error=str(exc))
            await asyncio.sleep(interval)
            return failed

    async def commands() -> None:
        while not stop.is_set():
            await guarded("commands", agent.take_command, False)

    async def cycle() -> None:
        await guarded("heartbeat", agent.cycle, None)

    async def schedules() -> None:
        assert scheduler is not None
        none: list[str] = []
        for line in await guarded("schedules", scheduler.tick, none):
            event(log, "schedule", result=line)
        for line in await guarded("watchdog", lambda: watchdog(agent.client), none):
            event(log, "watchdog", result=line)

    loops = [commands(), runtime.every(interval, cycle, stop)]
    if scheduler is not None:
        loops.append(runtime.every(interval, schedules, stop))
    tasks = [asyncio.ensure_future(loop) for loop in loops]
    await stop.wait()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.to_thread(agent.shutdown)
    event(log, "stopped_agent", agent=agent.name)
    return options.EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def work() -> int:
        values = options.resolve(OPTIONS, args)
        logs.setup("kv", values["log_level"])
        runner = make_runner(values)
        try:
            client = get_redis(values["redis_url"], **REDIS_PARAMS)
            check_connection(client, values["redis_url"])
        except RedisConfigError as exc:
            raise ServiceFailure(str(exc)) from None
        try:
            spiders = runner.installed()
        except RunnerError as exc:
            raise ConfigError(str(exc)) from None
        spiders.pop(store.FLEET_PREFIX, None)
        agent = Agent(
            client=client,
            name=values["name"] or socket.gethostname(),
            runner=runner,
            interval=values["interval"],
            ttl=values["ttl"],
            job_history=values["job_history"],
            spiders=spiders,
        )
        agent.restore()
        agent.heartbeat()
        scheduler = (
            ScheduleRunner(client, agent.name, timeout=values["start_timeout"])
            if values["schedules"]
            else None
        )
        event(
            log,
            "start",
            agent=agent.name,
            runner=runner.name,
            redis=mask_url(values["redis_url"]),
            spiders=",".join(f"{s}={p}" for s, p in sorted(spiders.items())),
            schedules=scheduler is not None,
        )
        return asyncio.run(serve(agent, scheduler, values["interval"]))

    return runtime.run(PROG, work)


if __name__ == "__main__":
    sys.exit(main())
