"""The alert rules, evaluated in Python: pure functions over the cluster view and a small state.

:func:`evaluate` takes a ``crawlfleet.views.cluster.cluster_snapshot`` (with its ``hub`` entry), the
:class:`AlertState` of the previous evaluations (what it needs to know "since when") and the time
(Redis's clock by default; the tests inject theirs), updates the state and returns the active
alerts. ``prometheus-rules.yml`` holds the same rules over ``/metrics``, with the same thresholds
(below); docs/alerts.md explains each one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

WORKER_GONE = "CrawlfleetWorkerGone"
AGENT_DOWN = "CrawlfleetAgentDown"
BAN_STORM = "CrawlfleetBanStorm"
HUB_MEMORY = "CrawlfleetHubNearMaxmemory"
JOB_STUCK = "CrawlfleetJobStuck"
DEADLETTER_GROWING = "CrawlfleetDeadLettersGrowing"
NAMES = (WORKER_GONE, AGENT_DOWN, BAN_STORM, HUB_MEMORY, JOB_STUCK, DEADLETTER_GROWING)

# A ban storm: at least BAN_STORM_BANS proxy bans of one spider within BAN_WINDOW seconds.
BAN_WINDOW = 300.0
BAN_STORM_BANS = 50
# The hub is near maxmemory from this share of it on (no alert without a maxmemory).
MEMORY_RATIO = 0.9
# A running job is stuck when its pages have not grown for STUCK_AFTER seconds.
STUCK_AFTER = 900.0
# Dead letters are growing while the list grew within the last DEADLETTER_WINDOW seconds.
DEADLETTER_WINDOW = 900.0


@dataclass(frozen=True)
class Alert:
    """One active alert: its rule, what it is about (labels), since when, and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    severity: str
    summary: str
    since: float
    value: float

    @property
    def key(self) -> str:
        """``Name{label=value,…}``: the alert's identity from one evaluation to the next."""
        inner = ",".join(f"{k}={v}" for k, v in self.labels)
        return f"{self.name}{{{inner}}}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "labels": dict(self.labels),
            "severity": self.severity,
            "summary": self.summary,
            "since": round(self.since, 3),
            "value": round(self.value, 3),
        }


@dataclass
class AlertState:
    """What the rules remember between evaluations (JSON in Redis: ``crawlfleet.alerts.store``).

    ``bans``: spider → worker → its ``proxy/banned`` last seen; ``ban_events``: spider →
    ``[[time, new bans], …]`` within the window; ``deadletter``: spider → ``[length, first growth,
    last growth]``; ``jobs``: running job id → ``[pages, since]``; ``memory``: since when the hub
    is near maxmemory.
    """

    bans: dict[str, dict[str, float]] = field(default_factory=dict)
    ban_events: dict[str, list[list[float]]] = field(default_factory=dict)
    deadletter: dict[str, list[float | None]] = field(default_factory=dict)
    jobs: dict[str, list[float]] = field(default_factory=dict)
    memory: float | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "bans": self.bans,
                "ban_events": self.ban_events,
                "deadletter": self.deadletter,
                "jobs": self.jobs,
                "memory": self.memory,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, raw: str | bytes | None) -> AlertState:
        """The state in ``raw``; a fresh one when it is missing or unreadable (never raises)."""
        try:
            data = json.loads(raw) if raw else {}
            state = cls(
                bans={
                    str(s): {str(w): float(n) for w, n in ws.items()}
                    for s, ws in data.get("bans", {}).items()
                },
                ban_events={
                    str(s): [[float(t), float(n)] for t, n in ev]
                    for s, ev in data.get("ban_events", {}).items()
                },
                deadletter={
                    str(s): [None if v is None else float(v) for v in entry][:3]
                    for s, entry in data.get("deadletter", {}).items()
                    if len(entry) == 3
                },
                jobs={str(j): [float(p), float(t)] for j, (p, t) in data.get("jobs", {}).items()},
                memory=None if data.get("memory") is None else float(data["memory"]),
            )
        except (ValueError, TypeError, AttributeError, OverflowError):
            return cls()
        return state


def evaluate(view: dict[str, Any], state: AlertState, now: float | None = None) -> list[Alert]:
    """The active alerts of ``view``, sorted by key; ``state`` is updated in place.

    ``now`` defaults to the hub's Redis time of the view (``hub.time``).
    """
    hub = view.get("hub") or {}
    clock = float(hub.get("time") or view["time"]) if now is None else now
    alerts = [
        *_workers_gone(view["spiders"], clock),
        *_agents_down(hub.get("agents", []), clock),
        *_ban_storms(hub.get("bans", {}), state, clock),
        *_memory(hub, state, clock),
        *_stuck_jobs(hub.get("jobs", []), state, clock),
        *_deadletters(view["spiders"], state, clock),
    ]
    return sorted(alerts, key=lambda a: a.key)


def worker_lost(worker: dict[str, Any]) -> bool:
    """A worker (``spiders[].workers[]``) whose lease deadline passed without a clean stop:
    killed, frozen or cut off from Redis (also ``crawlfleet_worker_lost`` of ``/metrics``)."""
    return not worker["alive"] and not worker["stopped"]


def _workers_gone(spiders: list[dict[str, Any]], now: float) -> list[Alert]:
    out = []
    for view in spiders:
        for w in view["workers"]:
            if not worker_lost(w):
                continue
            age = w["heartbeat_age"]
            if w["lease_expires_in"] is not None:
                since = now + min(0.0, float(w["lease_expires_in"]))
            else:
                since = now - float(age or 0.0)
            out.append(
                Alert(
                    WORKER_GONE,
                    (("spider", view["spider"]), ("worker", w["id"]), ("host", w["host"] or "")),
                    "warning",
                    f"worker {w['id']} of {view['spider']} missed its heartbeat "
                    f"({'late' if w['registered'] else 'reaped'}, last heard "
                    f"{'?' if age is None else f'{age:.0f}s'} ago)",
                    since,
                    float(age or 0.0),
                )
            )
    return out


def agent_lost(agent: dict[str, Any]) -> bool:
    """A job agent (``hub.agents[]``) past its liveness deadline without a clean stop: killed,
    frozen or cut off from Redis (also ``crawlfleet_agent_lost`` of ``/metrics``)."""
    return not agent["alive"] and not agent["stopped"]


def _agents_down(agents: list[dict[str, Any]], now: float) -> list[Alert]:
    """Every registered agent that is down: no job can start on its host, and the watchdog marks
    its running units ``lost``. An agent stopped cleanly (SIGTERM) is not down."""
    out = []
    for agent in agents:
        if not agent_lost(agent):
            continue
        since = min(float(agent["deadline"] or now), now)
        age = agent["heartbeat_age"]
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
        out.append(
            Alert(
                AGENT_DOWN,
                (("agent", agent["name"]), ("host", agent["host"] or "")),
                "warning",
                f"job agent {agent['name']} on {agent['host'] or '?'} is down since {stamp}: "
                "no job can start there",
                since,
                float(age) if age is not None else now - since,
            )
        )
    return out


def _ban_storms(bans: dict[str, dict[str, Any]], state: AlertState, now: float) -> list[Alert]:
    """At least BAN_STORM_BANS proxy bans of one spider within BAN_WINDOW seconds."""
    out = []
    for spider, workers in bans.items():
        last = state.bans.get(spider, {})
        events = [e for e in state.ban_events.get(spider, []) if e[0] > now - BAN_WINDOW]
        for worker, count in workers.items():
            before = last.get(worker)
            if before is not None and count != before:
                # A counter that went down belongs to a restarted worker: all of it is new.
                events.append([now, float(count - before if count > before else count)])
        state.bans[spider] = {w: float(n) for w, n in workers.items()}
        state.ban_events[spider] = events
        total = sum(n for _, n in events)
        if total >= BAN_STORM_BANS:
            out.append(
                Alert(
                    BAN_STORM,
                    (("spider", spider),),
                    "warning",
                    f"{total:.0f} proxy bans of {spider} in the last {BAN_WINDOW / 60:.0f} minutes",
                    min(t for t, _ in events),
                    total,
                )
            )
    for gone in set(state.bans) - set(bans):
        state.bans.pop(gone, None)
        state.ban_events.pop(gone, None)
    return out


def _memory(hub: dict[str, Any], state: AlertState, now: float) -> list[Alert]:
    """Redis has used MEMORY_RATIO of its maxmemory (then it evicts or refuses writes)."""
    used, limit = hub.get("used_memory") or 0, hub.get("maxmemory") or 0
    if not limit or used / limit < MEMORY_RATIO:
        state.memory = None
        return []
    if state.memory is None:
        state.memory = now
    return [
        Alert(
            HUB_MEMORY,
            (),
            "critical",
            f"the hub's Redis uses {used / limit:.0%} of its maxmemory "
            f"({used:,} of {limit:,} bytes)",
            state.memory,
            used / limit,
        )
    ]


def _stuck_jobs(jobs: list[dict[str, Any]], state: AlertState, now: float) -> list[Alert]:
    """A running job whose pages have not grown for STUCK_AFTER seconds."""
    out = []
    running = {}
    for job in jobs:
        if job.get("state") != "running":
            continue
        job_id, pages = str(job["id"]), float(job.get("pages") or 0)
        entry = state.jobs.get(job_id)
        started = job.get("started")
        if entry is None:
            # Never seen: a job without a page counts from its start, else from now.
            since = float(started) if pages == 0 and started is not None else now
        elif pages != entry[0]:
            since = now
        else:
            since = entry[1]
        running[job_id] = [pages, since]
        if now - since >= STUCK_AFTER:
            out.append(
                Alert(
                    JOB_STUCK,
                    (("job_id", job_id), ("spider", str(job.get("spider")))),
                    "warning",
                    f"job {job_id} ({job.get('project')}/{job.get('spider')}) is running but its "
                    f"pages ({pages:.0f}) have not grown for {(now - since) / 60:.0f} minutes",
                    since,
                    now - since,
                )
            )
    state.jobs = running
    return out


def _deadletters(spiders: list[dict[str, Any]], state: AlertState, now: float) -> list[Alert]:
    """The dead-letter list of a spider grew within the last DEADLETTER_WINDOW seconds."""
    out = []
    seen = set()
    for view in spiders:
        spider, length = view["spider"], view["deadletter"]
        if length is None:
            continue
        seen.add(spider)
        entry = state.deadletter.get(spider)
        if entry is None:
            state.deadletter[spider] = [float(length), None, None]
            continue
        last, first, latest = entry
        if length > (last or 0):
            if latest is None or now - latest >= DEADLETTER_WINDOW:
                first = now
            latest = now
        state.deadletter[spider] = [float(length), first, latest]
        if latest is not None and first is not None and now - latest < DEADLETTER_WINDOW:
            out.append(
                Alert(
                    DEADLETTER_GROWING,
                    (("spider", spider),),
                    "warning",
                    f"dead letters of {spider} are growing ({length:,} now): malformed queue "
                    "entries are being set aside",
                    first,
                    float(length),
                )
            )
    for gone in set(state.deadletter) - seen:
        state.deadletter.pop(gone)
    return out
