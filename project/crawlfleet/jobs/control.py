"""Start, stop, pause and resume jobs through the agents (the CLI and the scheduler call these).

Starting checks everything before anything starts: the project and spider are installed on a
live agent, enough live agents have them, no job of the spider is running (unless ``overlap``).
Then the job is recorded ``pending``, each chosen agent gets a ``start`` command, and every agent
must answer within ``timeout``: all started → ``running``; any refusal or silence → the units that
did start are stopped and the job is ``failed`` with the reason. Never half-started.

Stopping drains: the job's ``stopping`` state is set once (two operators: the second is told it
is already stopping), ``<spider>:paused`` makes the workers stop taking requests, each agent stops
its units (SIGTERM: leases go back to the queue), and the job ends ``finished`` with its numbers.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import BloomConfigError
from crawlfleet.frontier.shards import crawl_shards
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.jobs import store
from crawlfleet.jobs.store import JobError, job_keys

ACK_TTL = 600  # seconds an answer waits to be read
DEFAULT_TIMEOUT = 30.0
LOG_LINES = 50  # lines of each unit's log shown (``unit_logs``), at most MAX_LOG_LINES
MAX_LOG_LINES = 500
LOG_TIMEOUT = 5.0


@dataclass(frozen=True)
class JobSpec:
    """What to run: a project's spider, its arguments and settings, on how many workers."""

    project: str
    spider: str
    args: Sequence[tuple[str, str]] = ()
    settings: Sequence[tuple[str, str]] = ()
    workers: int | None = None  # None: every live agent that has the spider
    overlap: bool = False
    fresh_dupefilter: bool = False
    schedule: str = ""


def name_value(flag: str, text: str) -> tuple[str, str]:
    """One ``-a NAME=VALUE`` / ``-s NAME=VALUE`` of a job (``flag`` names it in the error):
    :class:`crawlfleet.jobs.store.JobError`, one line, for anything else."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise store.JobError(f"{flag} takes NAME=VALUE, got {text[:60]!r}")
    return name.strip(), value


def workers_count(text: str) -> int | None:
    """How many workers a job runs on: a number >= 1, or ``all`` (None); else ``JobError``."""
    if text.strip().lower() == "all":
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise store.JobError(f"must be a number >= 1 or all, got {text[:40]!r}")
    return int(text)


@dataclass
class Outcome:
    """What a command did: the job, a line for the operator, and whether it failed."""

    job: str
    message: str
    failed: bool = False


def agent_hosts(client: redis.Redis) -> dict[str, str]:
    """Agent name → host name (how crawl workers name their host)."""
    return {agent.name: agent.host for agent in store.agents(client)}


def choose_workers(client: redis.Redis, spec: JobSpec) -> list[str]:
    """The live agents that will run ``spec``; :class:`JobError` (one line) when there are none or
    too few."""
    found = store.agents(client)
    store.check_installed(found, spec.project, spec.spider)
    having = [a for a in found if a.spiders.get(spec.spider) == spec.project]
    live = [a.name for a in having if a.alive]
    down = [a.name for a in having if not a.alive]
    wanted = len(live) if spec.workers is None else spec.workers
    if not live or wanted > len(live):
        down_text = f"; down: {', '.join(down)}" if down else ""
        raise JobError(
            f"{spec.spider} needs {max(wanted, 1)} live worker(s), {len(live)} live "
            f"({', '.join(live) or 'none'}{down_text}); nothing was started"
        )
    return live[:wanted]


def send(client: redis.Redis, agent: str, action: str, job_id: str, **extra: Any) -> str:
    """Queue ``action`` for ``agent``; the command's id (its answer arrives at ``ack(id)``)."""
    command = uuid.uuid4().hex
    payload = {"id": command, "action": action, "job": job_id, **extra}
    client.rpush(job_keys(client).commands(agent), json.dumps(payload))
    return command


def answer(client: redis.Redis, command: str, **reply: Any) -> None:
    """An agent's answer to ``command`` (read once by whoever sent it)."""
    pipe = client.pipeline(transaction=True)
    pipe.rpush(job_keys(client).ack(command), json.dumps(reply))
    pipe.expire(job_keys(client).ack(command), ACK_TTL)
    pipe.execute()


def wait_answers(
    client: redis.Redis, sent: Mapping[str, str], timeout: float
) -> dict[str, dict[str, Any]]:
    """Each agent's answer (``{"ok": False, "error": …}`` for one that did not answer in time)."""
    deadline = time.monotonic() + timeout
    replies: dict[str, dict[str, Any]] = {}
    for agent, command in sent.items():
        left = max(0.01, deadline - time.monotonic())
        got = client.blpop([job_keys(client).ack(command)], timeout=left)
        if got is None:
            replies[agent] = {"ok": False, "error": f"agent {agent} did not answer in {timeout:g}s"}
            continue
        try:
            replies[agent] = dict(json.loads(got[1]))
        except (ValueError, TypeError):
            replies[agent] = {"ok": False, "error": f"agent {agent} sent an unreadable answer"}
    return replies


def fresh_dupefilter(client: redis.Redis, spider: str) -> None:
    """Forget the crawl's fingerprints (set and Bloom filter at their default keys, in every
    shard of a sharded crawl)."""
    for shard in crawl_shards(client, spider):
        keys = shard.keys
        client.delete(keys.dupefilter)
        with contextlib.suppress(BloomConfigError):  # no Bloom filter there
            BloomFilter.existing(client, keys.bloomfilter).clear()


def running_job_of(client: redis.Redis, spider: str) -> dict[str, Any] | None:
    for job in store.active_jobs(client):
        if job.get("spider") == spider:
            return job
    return None


def start_job(
    client: redis.Redis, spec: JobSpec, by: str, timeout: float = DEFAULT_TIMEOUT
) -> Outcome:
    """Start ``spec`` on its workers, all or nothing (module docstring)."""
    workers = choose_workers(client, spec)
    if not spec.overlap:
        other = running_job_of(client, spec.spider)
        if other is not None:
            raise JobError(
                f"job {other['id']} of {spec.spider} is {other['state']}; stop it first "
                f"(`crawlfleet job stop {other['id']}`)"
            )
    if spec.fresh_dupefilter:
        fresh_dupefilter(client, spec.spider)
    job_id = store.create_job(
        client,
        {
            "project": spec.project,
            "spider": spec.spider,
            "args": [list(a) for a in spec.args],
            "settings": [list(s) for s in spec.settings],
            "workers": workers,
            "by": by,
            "schedule": spec.schedule,
            "dupefilter": "fresh" if spec.fresh_dupefilter else "keep",
        },
    )
    sent = {agent: send(client, agent, "start", job_id) for agent in workers}
    replies = wait_answers(client, sent, timeout)
    refused = {a: r for a, r in replies.items() if not r.get("ok")}
    if refused:
        started = [a for a, r in replies.items() if r.get("ok")]
        stops = {a: send(client, a, "stop", job_id) for a in started}
        wait_answers(client, stops, timeout)
        for agent, reply in refused.items():
            store.set_host(client, job_id, agent, state="failed", error=reply.get("error", ""))
        error = "; ".join(str(r.get("error") or f"agent {a} refused") for a, r in refused.items())
        pipe = client.pipeline(transaction=True)
        pipe.hset(
            job_keys(client).job(job_id),
            mapping={"state": "failed", "error": error, "ended": store.now_ms(client)},
        )
        pipe.srem(job_keys(client).jobs_active, job_id)
        pipe.execute()
        message = f"job {job_id} failed to start, nothing runs: {error}"
        store.record_history(client, job_id, by, "start", message)
        return Outcome(job_id, message, True)
    store.transition(client, job_id, ["pending"], "running", started=store.now_ms(client))
    units = sum(len(r.get("units", [])) for r in replies.values())
    message = (
        f"job {job_id}: {spec.project}/{spec.spider} running on {len(workers)} worker(s) "
        f"({', '.join(workers)}), {units} process(es)"
    )
    store.record_history(client, job_id, by, "start", message)
    # A crawl that ended before the job was marked running is finished now.
    store.finalize(client, job_id, agent_hosts(client))
    return Outcome(job_id, message)


def stop_job(
    client: redis.Redis, job_id: str, by: str, timeout: float = DEFAULT_TIMEOUT
) -> Outcome:
    """Drain ``job_id`` (module docstring); a job already stopping or ended is a no-op."""
    job = store.get_job(client, job_id)
    changed, old = store.transition(
        client, job_id, ["running", "paused"], "stopping", stopped_by=by
    )
    if not changed:
        if old == "stopping":
            current = store.get_job(client, job_id)
            return Outcome(
                job_id, f"job {job_id} is already stopping (by {current.get('stopped_by')})"
            )
        if old in store.ENDED:
            return Outcome(job_id, f"job {job_id} has already ended ({old})")
        raise JobError(f"job {job_id} is {old}: it can be stopped once it has started")
    store.record_history(client, job_id, by, "stop", f"draining ({old} before)")
    spider = job["spider"]
    client.set(
        SpiderKeys.for_client(spider, client).paused,
        store.pause_marker(job_id, by, store.now_ms(client)),
    )
    hosts = job["hosts"]
    live = [
        w for w in job.get("workers", []) if hosts.get(w, {}).get("state") not in store.HOST_ENDS
    ]
    replies = wait_answers(client, {a: send(client, a, "stop", job_id) for a in live}, timeout)
    silent = [r["error"] for r in replies.values() if not r.get("ok")]
    state = store.finalize(client, job_id, agent_hosts(client))
    if silent:
        return Outcome(
            job_id,
            f"job {job_id} is stopping; {'; '.join(silent)} (it ends when that agent stops its "
            f"units or is found down)",
            True,
        )
    record = store.get_job(client, job_id)
    stats = record.get("stats") or {}
    return Outcome(
        job_id,
        f"job {job_id} stopped ({state or record.get('state')}): {stats.get('pages', 0)} pages, "
        f"{stats.get('items', 0)} items",
    )


def pause_job(client: redis.Redis, job_id: str, by: str) -> Outcome:
    """The job's workers stop taking requests (``<spider>:paused``); idempotent."""
    job = _switch(client, job_id, "running", "paused", "paused")
    if job is None:
        return Outcome(job_id, f"job {job_id} was already paused")
    client.set(
        SpiderKeys.for_client(job["spider"], client).paused,
        store.pause_marker(job_id, by, store.now_ms(client)),
    )
    store.record_history(client, job_id, by, "pause", "workers stop taking requests")
    return Outcome(job_id, f"paused job {job_id} ({job['spider']}): workers keep their leases")


def resume_job(client: redis.Redis, job_id: str, by: str) -> Outcome:
    """A paused job carries on; idempotent."""
    job = _switch(client, job_id, "paused", "running", "resumed")
    if job is None:
        return Outcome(job_id, f"job {job_id} was not paused")
    client.delete(SpiderKeys.for_client(job["spider"], client).paused)
    store.record_history(client, job_id, by, "resume", "workers take requests again")
    return Outcome(job_id, f"resumed job {job_id} ({job['spider']}) by {by}")


def _switch(
    client: redis.Redis, job_id: str, before: str, after: str, done: str
) -> dict[str, Any] | None:
    """The job moved from ``before`` to ``after``; None when it already was ``after``, JobError
    (``only a <before> job can be <done>``) when it is neither."""
    job = store.get_job(client, job_id)
    changed, old = store.transition(client, job_id, [before], after)
    if changed:
        return job
    if old == after:
        return None
    raise JobError(f"job {job_id} is {old}: only a {before} job can be {done}")


def unit_logs(
    client: redis.Redis, job_id: str, lines: int = LOG_LINES, timeout: float = LOG_TIMEOUT
) -> dict[str, dict[str, Any]]:
    """The last ``lines`` lines of the log of each crawler unit of ``job_id``, asked of each of
    its agents (``logs`` command): worker → ``{"ok": True, "units": {unit: [line, …]}}`` or
    ``{"ok": False, "error": …}`` for an agent that is down or did not answer in ``timeout``."""
    job = store.get_job(client, job_id)
    wanted = max(1, min(MAX_LOG_LINES, lines))
    alive = {agent.name for agent in store.agents(client) if agent.alive}
    replies: dict[str, dict[str, Any]] = {}
    sent = {}
    for worker in job.get("workers") or []:
        if worker in alive:
            sent[worker] = send(client, worker, "logs", job_id, lines=wanted)
        else:
            replies[worker] = {"ok": False, "error": f"agent {worker} is down"}
    replies.update(wait_answers(client, sent, timeout))
    return dict(sorted(replies.items()))
