"""Job records and the agents' registry in the hub's Redis (key names: ``JobKeys``).

A job record is a hash (``crawlfleet:job:<id>``) that outlives the crawl's own keys: it holds
what was asked (project, spider, arguments, settings, workers), who asked, its state and, once it
ended, the crawl's numbers. State changes go through :func:`transition` (one Lua call that
compares and sets, so two operators stopping one job cannot both win) and :func:`finalize` (a
WATCHed transaction: the first caller that sees every worker done writes the end and the stats;
the others find the job ended and do nothing).

Agents register themselves (``crawlfleet:agent:<name>``, ``crawlfleet:agents``): what is installed
on their host (spider → project) and a liveness deadline. That is how the hub knows the projects
and spiders, and which workers are up.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from crawlfleet.hub.clock import hub_ms
from crawlfleet.hub.fleetkeys import FLEET_PREFIX, JobKeys
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.lua import read_lua


def job_keys(client: object) -> JobKeys:
    """The names of the jobs', schedules' and agents' keys as ``client`` reaches them (under the
    tag ``{crawlfleet}`` on a Redis Cluster, so every job operation touches one slot)."""
    return JobKeys.for_client(client)


# The states of a job: pending, running, paused, stopping, and the ends.
ENDED = ("finished", "failed")
# What a worker host of a job can be: starting/running, or one of the ends.
HOST_ENDS = ("exited", "failed", "stopped", "lost")
# Scrapy stats summed into a job's numbers (written by the worker stats extension).
ERROR_STATS = ("log_count/ERROR",)
BAN_STATS = ("proxy/banned",)
# Operations kept in a job's history (``crawlfleet:job:<id>:history``), the newest.
HISTORY_LIMIT = 100

# KEYS[1] job. ARGV: n, n allowed states, then field/value pairs to set with the new state
# (the first pair is 'state', <new>). Returns {1, old} when it changed, {0, old} when not,
# {0, false} when there is no such job.
_TRANSITION = read_lua("crawlfleet.jobs", "transition.lua")


class JobError(LookupError):
    """An unknown job, project, spider or worker, or a job in the wrong state (one line)."""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def now_ms(client: redis.Redis) -> int:
    """Redis's clock in milliseconds (every time in a record is Redis's)."""
    return int(hub_ms(client))


def who() -> str:
    """``user@host`` of the operator running a command."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


# -- agents ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """One registered agent: its name, host, what it has installed, and whether it is alive.

    ``deadline`` is its liveness deadline (Redis ms), 0 once it stopped cleanly (``stopped``):
    an agent neither alive nor stopped is down (killed, frozen or cut off from Redis).
    """

    name: str
    host: str
    runner: str
    spiders: dict[str, str]  # spider -> project
    alive: bool
    heartbeat: int | None
    deadline: int
    stopped: bool


def register_agent(
    client: redis.Redis, name: str, info: Mapping[str, Any], ttl_ms: int, units: Mapping[str, Any]
) -> int:
    """Write ``name``'s record and push its liveness deadline ``ttl_ms`` ahead; Redis time."""
    now = now_ms(client)
    pipe = client.pipeline(transaction=True)
    pipe.hset(
        job_keys(client).agent(name),
        mapping={"info": json.dumps(dict(info)), "heartbeat": now, "units": json.dumps(units)},
    )
    pipe.zadd(job_keys(client).agents, {name: now + ttl_ms})
    pipe.execute()
    return now


def unregister_agent(client: redis.Redis, name: str) -> None:
    """A stopping agent is down at once, its deadline 0: a clean stop (its record stays, for the
    projects it had)."""
    client.zadd(job_keys(client).agents, {name: 0})


def agent_units(client: redis.Redis, name: str) -> dict[str, Any]:
    """What ``name`` last recorded it runs: job id → units (for an agent that restarts)."""
    raw = client.hget(job_keys(client).agent(name), "units")
    try:
        units = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return units if isinstance(units, dict) else {}


def agents(client: redis.Redis) -> list[Agent]:
    """Every registered agent, by name; ``alive`` by its deadline against Redis's clock."""
    now = now_ms(client)
    listed: list[Any] = list(client.zrange(job_keys(client).agents, 0, -1, withscores=True))
    pipe = client.pipeline(transaction=False)
    for member, _ in listed:
        pipe.hgetall(job_keys(client).agent(_s(member)))
    out = []
    for (member, deadline), record in zip(listed, pipe.execute(), strict=True):
        fields = {_s(k): _s(v) for k, v in record.items()}
        try:
            info = json.loads(fields.get("info", "{}"))
        except ValueError:
            info = {}
        spiders = info.get("spiders") if isinstance(info, dict) else None
        out.append(
            Agent(
                name=_s(member),
                host=str(info.get("host", "")) if isinstance(info, dict) else "",
                runner=str(info.get("runner", "")) if isinstance(info, dict) else "",
                spiders={str(k): str(v) for k, v in (spiders or {}).items()},
                alive=float(deadline) > now,
                heartbeat=int(fields["heartbeat"])
                if fields.get("heartbeat", "").isdigit()
                else None,
                deadline=int(deadline),
                stopped=float(deadline) <= 0,
            )
        )
    return sorted(out, key=lambda agent: agent.name)


def check_installed(found: Iterable[Agent], project: str, spider: str) -> None:
    """:class:`JobError` (one line) unless some agent of ``found`` has ``project``'s ``spider``."""
    listed = list(found)
    if spider == FLEET_PREFIX:
        raise JobError(f"no spider may be named {FLEET_PREFIX!r} (the prefix of the fleet's keys)")
    projects: dict[str, set[str]] = {}
    for agent in listed:
        for name, owner in agent.spiders.items():
            projects.setdefault(owner, set()).add(name)
    if not projects:
        raise JobError("no agent has registered a project yet (is `crawlfleet agent` running?)")
    if project not in projects:
        raise JobError(f"unknown project {project!r} (known: {', '.join(sorted(projects))})")
    if spider not in projects[project]:
        raise JobError(
            f"project {project!r} has no spider {spider!r} "
            f"(spiders: {', '.join(sorted(projects[project]))})"
        )


# -- jobs --------------------------------------------------------------------------------------


def _decode(raw: Mapping[Any, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {_s(k): _s(v) for k, v in raw.items()}
    for name in ("args", "settings", "workers", "stats"):
        if name in record:
            with contextlib.suppress(ValueError):
                record[name] = json.loads(record[name])
    hosts = {}
    for name in [k for k in record if k.startswith("host:")]:
        try:
            hosts[name[5:]] = json.loads(record.pop(name))
        except ValueError:
            hosts[name[5:]] = {"state": "unknown"}
    record["hosts"] = hosts
    return record


def get_job(client: redis.Redis, job_id: str) -> dict[str, Any]:
    """The record of ``job_id``, decoded; :class:`JobError` when there is none."""
    raw = client.hgetall(job_keys(client).job(job_id)) if job_id else {}
    if not raw:
        raise JobError(f"no job {job_id!r} (`crawlfleet job list` shows the jobs)")
    return _decode(raw)


def create_job(client: redis.Redis, fields: Mapping[str, Any]) -> str:
    """A new pending job's id; ``fields`` are written as they are (JSON for the structured)."""
    job_id = str(client.incr(job_keys(client).job_seq))
    now = now_ms(client)
    record: dict[Any, Any] = {
        "id": job_id,
        "state": "pending",
        "created": now,
        **{k: json.dumps(v) if isinstance(v, list | dict) else str(v) for k, v in fields.items()},
    }
    pipe = client.pipeline(transaction=True)
    pipe.hset(job_keys(client).job(job_id), mapping=record)
    pipe.zadd(job_keys(client).jobs, {job_id: now})
    pipe.sadd(job_keys(client).jobs_active, job_id)
    pipe.execute()
    return job_id


def record_history(
    client: redis.Redis, job_id: str, by: str, action: str, detail: str = ""
) -> None:
    """Append one operation (who did what) to the job's bounded history."""
    entry = {"time": now_ms(client), "by": by, "action": action, "detail": detail[:500]}
    key = job_keys(client).job_history(job_id)
    pipe = client.pipeline(transaction=True)
    pipe.rpush(key, json.dumps(entry))
    pipe.ltrim(key, -HISTORY_LIMIT, -1)
    pipe.execute()


def job_history(client: redis.Redis, job_id: str) -> list[dict[str, Any]]:
    """The job's operations, oldest first (unreadable entries skipped)."""
    out = []
    for raw in client.lrange(job_keys(client).job_history(job_id), 0, -1):
        with contextlib.suppress(ValueError, TypeError):
            entry = json.loads(raw)
            if isinstance(entry, dict):
                out.append(entry)
    return out


def list_jobs(client: redis.Redis, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` jobs, newest first."""
    ids = [_s(i) for i in client.zrevrange(job_keys(client).jobs, 0, max(0, limit - 1))]
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hgetall(job_keys(client).job(job_id))
    return [_decode(raw) for raw in pipe.execute() if raw]


def active_jobs(client: redis.Redis) -> list[dict[str, Any]]:
    """Every job that has not ended."""
    ids = sorted((_s(i) for i in client.smembers(job_keys(client).jobs_active)), key=_order)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hgetall(job_keys(client).job(job_id))
    found = []
    for job_id, raw in zip(ids, pipe.execute(), strict=True):
        if raw:
            found.append(_decode(raw))
        else:
            client.srem(job_keys(client).jobs_active, job_id)
    return found


def _order(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)


def transition(
    client: redis.Redis, job_id: str, allowed: Iterable[str], new: str, **fields: Any
) -> tuple[bool, str | None]:
    """Set ``state`` to ``new`` (and ``fields``) if it is one of ``allowed``: (changed, old)."""
    states = list(allowed)
    pairs: list[str] = ["state", new]
    for name, value in fields.items():
        pairs += [name, json.dumps(value) if isinstance(value, list | dict) else str(value)]
    changed, old = client.eval(
        _TRANSITION, 1, job_keys(client).job(job_id), len(states), *states, *pairs
    )
    return bool(changed), None if old is None else _s(old)


def set_host(client: redis.Redis, job_id: str, agent: str, **state: Any) -> None:
    """Record what ``agent`` reports of its part of the job (``state`` and details)."""
    client.hset(job_keys(client).job(job_id), f"host:{agent}", json.dumps(state))


def crawl_numbers(
    client: redis.Redis, spider: str, pids: Mapping[str, Iterable[int]], hosts: Mapping[str, str]
) -> dict[str, Any]:
    """The job's numbers from the crawl's keys: the workers the agents started (their host and
    pid), their Scrapy statistics summed, and each agent's share of the pages."""
    k = SpiderKeys.for_client(spider, client)
    ids = {_s(w) for w in client.zrange(k.ops_workers, 0, -1)}
    ids |= {_s(w) for w in client.zrange(k.workers, 0, -1)}
    ordered = sorted(ids)
    pipe = client.pipeline(transaction=False)
    for w in ordered:
        pipe.hget(k.worker(w), "info")
        pipe.hgetall(k.ops_scrapy(w))
    replies = pipe.execute()
    owner = {(hosts.get(agent, ""), int(pid)): agent for agent, ps in pids.items() for pid in ps}
    per: dict[str, dict[str, float]] = {agent: {"pages": 0, "items": 0} for agent in pids}
    total = {"pages": 0.0, "items": 0.0, "errors": 0.0, "bans": 0.0}
    for i, _w in enumerate(ordered):
        try:
            info = json.loads(replies[2 * i] or "{}")
        except ValueError:
            continue
        agent = owner.get((str(info.get("host", "")), int(info.get("pid", -1) or -1)))
        if agent is None:
            continue
        stats = {_s(a): float(_s(b)) for a, b in replies[2 * i + 1].items() if _number(b)}
        pages, items = stats.get("response_received_count", 0), stats.get("item_scraped_count", 0)
        per[agent]["pages"] += pages
        per[agent]["items"] += items
        total["pages"] += pages
        total["items"] += items
        total["errors"] += sum(stats.get(name, 0) for name in ERROR_STATS)
        total["bans"] += sum(stats.get(name, 0) for name in BAN_STATS)
    pages = total["pages"]
    out: dict[str, Any] = {name: int(value) for name, value in total.items()}
    out["failed"] = int(client.llen(k.failed)) if client.type(k.failed) in (b"list", "list") else 0
    out["deadletter"] = (
        int(client.llen(k.deadletter)) if client.type(k.deadletter) in (b"list", "list") else 0
    )
    out["per_worker"] = {
        agent: {
            "pages": int(v["pages"]),
            "items": int(v["items"]),
            "share": round(v["pages"] / pages, 3) if pages else 0.0,
        }
        for agent, v in per.items()
    }
    return out


def _number(raw: Any) -> bool:
    try:
        float(_s(raw))
    except ValueError:
        return False
    return True


def finalize(client: redis.Redis, job_id: str, agent_hosts: Mapping[str, str]) -> str | None:
    """End the job if every worker of it is done: its state (``finished``/``failed``) once, by
    whoever gets there first; None when it is not done yet or had already ended.

    ``agent_hosts`` maps agent names to their host names (how a crawl worker names its host).
    """
    key = job_keys(client).job(job_id)
    for _ in range(10):
        with client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                raw = pipe.hgetall(key)
                if not raw:
                    return None
                job = _decode(raw)
                if job.get("state") not in ("running", "paused", "stopping"):
                    return None
                workers = job.get("workers") or []
                hosts = job["hosts"]
                if any(hosts.get(w, {}).get("state") not in HOST_ENDS for w in workers):
                    return None
                stopping = job["state"] == "stopping"
                bad = [
                    f"{w}: {hosts[w].get('error') or hosts[w]['state']}"
                    for w in workers
                    if hosts[w]["state"] in ("failed", "lost")
                ]
                state = "failed" if bad and not stopping else "finished"
                pids = {w: hosts[w].get("pids", []) for w in workers}
                numbers = crawl_numbers(client, job["spider"], pids, agent_hosts)
                ended = now_ms(client)
                started = int(job.get("started") or job.get("created") or ended)
                numbers["duration"] = round((ended - started) / 1000.0, 3)
                pipe.multi()
                fields: dict[Any, Any] = {
                    "state": state,
                    "ended": ended,
                    "stats": json.dumps(numbers),
                }
                if bad and not job.get("error"):
                    fields["error"] = "; ".join(bad)
                pipe.hset(key, mapping=fields)
                pipe.srem(job_keys(client).jobs_active, job_id)
                pipe.rpush(
                    job_keys(client).job_history(job_id),
                    json.dumps(
                        {
                            "time": ended,
                            "by": job.get("stopped_by") or "agents",
                            "action": "end",
                            "detail": f"{state}: {numbers['pages']} pages, "
                            f"{numbers['items']} items" + (f"; {'; '.join(bad)}" if bad else ""),
                        }
                    ),
                )
                pipe.ltrim(job_keys(client).job_history(job_id), -HISTORY_LIMIT, -1)
                pipe.execute()
            except redis.WatchError:
                continue
        release_pause(client, job["spider"], job_id)
        return state
    return None


def pause_marker(job_id: str, by: str, now: int) -> str:
    """What a job writes into ``<spider>:paused`` (``crawlfleet pause``'s fields, and the job)."""
    return json.dumps({"by": by, "time": round(now / 1000.0, 3), "job": job_id})


def release_pause(client: redis.Redis, spider: str, job_id: str) -> bool:
    """Delete ``<spider>:paused`` if this job set it (an operator's own pause stays)."""
    key = SpiderKeys.for_client(spider, client).paused
    raw = client.get(key)
    try:
        mine = raw is not None and json.loads(raw).get("job") == job_id
    except (ValueError, AttributeError):
        mine = False
    return bool(mine and client.delete(key))


def trim_history(client: redis.Redis, keep: int) -> int:
    """Delete the oldest ended job records beyond the newest ``keep``; how many went."""
    if client.zcard(job_keys(client).jobs) <= keep:
        return 0
    active = {_s(i) for i in client.smembers(job_keys(client).jobs_active)}
    ended = [_s(i) for i in client.zrevrange(job_keys(client).jobs, 0, -1) if _s(i) not in active]
    gone = ended[keep:]
    if gone:
        pipe = client.pipeline(transaction=True)
        for job_id in gone:
            pipe.delete(job_keys(client).job(job_id), job_keys(client).job_history(job_id))
        pipe.zrem(job_keys(client).jobs, *gone)
        pipe.execute()
    return len(gone)
