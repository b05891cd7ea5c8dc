"""The hub itself: its round trip and CPU share (the politeness verdict's inputs), ``INFO memory``
and ``INFO errorstats`` (a full hub), the jobs that have not ended and the agents' registry
(``crawlfleet.jobs.store``): the inputs of the alerts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from crawlfleet.hub.clock import hub_ms
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.urls import is_cluster_client
from crawlfleet.jobs import store
from crawlfleet.views.values import as_int, as_num


class HubProbe:
    """Remembers Redis's CPU time between snapshots, so that a watching reader (``status
    --watch``, the dashboard) sees the share of a core Redis used since its previous look."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None  # (monotonic s, CPU s) of the last look
        self._share: float | None = None

    def cpu(self, client: redis.Redis) -> float | None:
        """Redis's CPU seconds per second since the previous call at least a second ago (None:
        the first call, or ``INFO`` refused by the user's ACL)."""
        try:
            info = client.info("cpu")
            used = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        except (redis.ResponseError, KeyError, TypeError, ValueError):
            return None
        now = time.monotonic()
        last = self._last
        if last is not None and now - last[0] < 1.0:
            return self._share
        self._last = (now, used)
        self._share = None if last is None else round(max(used - last[1], 0.0) / (now - last[0]), 3)
        return self._share


def hub_health(client: redis.Redis, probe: HubProbe | None = None) -> dict[str, Any]:
    """``{"rtt_ms": the round trip of one PING, "cpu": HubProbe.cpu or None}``.

    Redis runs one command at a time: when its CPU is saturated, or a slow command or script
    holds it, every client's round trip grows; so the PING's round trip is the signal any reader
    can measure (also the dashboard's ACL user, which may not run ``INFO``).
    """
    start = time.perf_counter()
    client.ping()
    rtt = (time.perf_counter() - start) * 1000
    return {"rtt_ms": round(rtt, 3), "cpu": probe.cpu(client) if probe is not None else None}


def hub_full(memory: dict[str, Any]) -> bool:
    """Whether Redis refuses writes now (``INFO memory``): it has a ``maxmemory`` and uses it
    all, not counting its replication and AOF buffers (``mem_not_counted_for_evict``), as Redis
    itself counts. With ``noeviction`` (the redis role's) every write that adds data fails."""
    limit = as_int(memory.get("maxmemory"))
    counted = as_int(memory.get("used_memory")) - as_int(memory.get("mem_not_counted_for_evict"))
    return limit > 0 and counted >= limit


def oom_refusals(errors: dict[str, Any]) -> int:
    """Commands Redis refused with ``OOM`` (at ``maxmemory``) since it started (``INFO
    errorstats``; 0 when none was)."""
    entry = errors.get("errorstat_OOM")
    return as_int(entry.get("count")) if isinstance(entry, dict) else 0


def _hub_memory(client: redis.Redis) -> dict[str, Any]:
    """``used_memory``, ``maxmemory``, ``full`` (:func:`hub_full`) and ``oom_refusals``
    (:func:`oom_refusals`), each None where ``INFO`` is refused. On a Redis Cluster those of every
    primary added up, full when one primary is (it refuses the writes of its slots)."""
    if is_cluster_client(client):
        primaries = client.PRIMARIES  # type: ignore[attr-defined]
        try:
            nodes = list(client.info("memory", target_nodes=primaries).values())
            stats = list(client.info("errorstats", target_nodes=primaries).values())
        except redis.ResponseError:
            nodes = stats = []
    else:
        info = client.pipeline(transaction=False)
        info.info("memory")
        info.info("errorstats")
        memory, errors = info.execute(raise_on_error=False)
        nodes = [] if isinstance(memory, redis.ResponseError) else [memory]
        stats = [] if isinstance(errors, redis.ResponseError) else [errors]
    return {
        "used_memory": sum(as_int(n.get("used_memory")) for n in nodes) if nodes else None,
        "maxmemory": sum(as_int(n.get("maxmemory")) for n in nodes) if nodes else None,
        "full": any(hub_full(n) for n in nodes) if nodes else None,
        "oom_refusals": sum(oom_refusals(n) for n in stats) if stats else None,
    }


def hub_snapshot(client: redis.Redis, spiders: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The hub's own numbers (the ``hub`` entry of ``status --json``, read by the alerts).

    Redis memory (``INFO memory``), whether it is full (:func:`hub_full`) and how many writes it
    refused at ``maxmemory`` (``INFO errorstats``; each None where INFO is refused), the jobs
    that have not ended with the pages their workers crawled so far (as a job's record counts
    them when it ends), every registered job agent (``crawlfleet agent``) with its liveness, and
    each worker's ``proxy/banned`` (its Scrapy stats) of the given ``spider_snapshot`` views.
    """
    now = hub_ms(client) / 1000  # seconds
    pipe = client.pipeline(transaction=False)
    for view in spiders:
        for w in view["workers"]:
            pipe.hget(
                SpiderKeys.for_client(view["spider"], client).ops_scrapy(w["id"]), "proxy/banned"
            )
    replies = iter(pipe.execute(raise_on_error=False))
    bans = {
        view["spider"]: {w["id"]: as_int(as_num(next(replies))) for w in view["workers"]}
        for view in spiders
    }
    # A user refused INFO or the jobs' and agents' keys (not the ACL's dashboard) gets no memory,
    # no jobs, no agents.
    jobs: list[dict[str, Any]] = []
    try:
        found = store.agents(client)
        active = store.active_jobs(client)
    except redis.ResponseError:
        found, active = [], []
    hosts = {agent.name: agent.host for agent in found}
    for job in active:
        listed = job.get("workers")
        workers: list[Any] = listed if isinstance(listed, list) else []
        pids = {w: job["hosts"].get(w, {}).get("pids", []) for w in workers}
        started = as_num(job.get("started"))
        jobs.append(
            {
                "id": job["id"],
                "project": job.get("project"),
                "spider": job.get("spider"),
                "state": job.get("state"),
                "started": None if started is None else round(started / 1000.0, 3),
                "pages": store.crawl_numbers(client, str(job.get("spider")), pids, hosts)["pages"],
            }
        )
    return {
        "time": round(now, 3),
        **_hub_memory(client),
        "jobs": jobs,
        "agents": [
            {
                "name": agent.name,
                "host": agent.host,
                "runner": agent.runner,
                "alive": agent.alive,
                "stopped": agent.stopped,
                "deadline": None if agent.stopped else round(agent.deadline / 1000.0, 3),
                "heartbeat_age": None
                if agent.heartbeat is None
                else round(now - agent.heartbeat / 1000.0, 3),
            }
            for agent in found
        ],
        "bans": bans,
    }
