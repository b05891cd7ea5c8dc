"""Recurring jobs: schedules kept in the hub's Redis, fired by one scheduler (the hub's agent).

A schedule is one JSON value of ``crawlfleet:schedules`` (field: its id) with its next firing
time, so it survives a restart of the hub or of the scheduler. Each :meth:`ScheduleRunner.tick`:

- takes the scheduler lock (``SET NX PX``, renewed every tick): two schedulers never fire one
  schedule twice;
- fires every schedule whose ``next`` has come, once, then sets ``next`` to the first occurrence
  strictly after now (``timespec.next_fire``): a scheduler down for many occurrences catches up
  with ONE job when it is back, never one per miss;
- skips (and records why in ``last_result``) when a job of the same spider still runs, unless the
  schedule says ``overlap``; a failed start is recorded the same way, the next occurrence tries
  again.

Times are Redis's clock (``TIME``) unless a test injects ``clock``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from crawlfleet.jobs import control, store
from crawlfleet.jobs.store import JobError, job_keys
from crawlfleet.jobs.timespec import check_cron, next_fire, parse_every

LOCK_MS = 30_000


def redis_clock(client: redis.Redis) -> Callable[[], float]:
    def now() -> float:
        return store.now_ms(client) / 1000.0

    return now


def add_schedule(client: redis.Redis, fields: dict[str, Any], now: float) -> dict[str, Any]:
    """A new schedule (``fields``: project, spider, cron or every, …), its first ``next`` set."""
    schedule_id = str(client.incr(job_keys(client).schedule_seq))
    record = {
        "id": schedule_id,
        "paused": False,
        "created": now,
        "last": None,
        "last_job": None,
        "last_result": None,
        **fields,
    }
    record["next"] = next_fire(now=now, cron=record.get("cron", ""), every=record.get("every", 0))
    client.hset(job_keys(client).schedules, schedule_id, json.dumps(record))
    return record


def when_fields(cron: str | None, every: str | None) -> dict[str, Any]:
    """The firing time of a new schedule (``cron`` or ``every``, one of them), checked:
    :class:`~crawlfleet.jobs.timespec.TimeSpecError` (one line naming the flag) otherwise."""
    if cron is not None:
        return {"cron": check_cron(cron)}
    return {"every": parse_every(every or ""), "every_text": (every or "").strip()}


def create_schedule(
    client: redis.Redis,
    when: dict[str, Any],
    spec: control.JobSpec,
    dupefilter: str,
    by: str,
) -> dict[str, Any]:
    """Add a schedule of ``spec`` (``schedule add`` and the dashboard): the project and spider
    must be installed on an agent (:class:`JobError` otherwise); ``when`` from
    :func:`when_fields`."""
    store.check_installed(store.agents(client), spec.project, spec.spider)
    return add_schedule(
        client,
        {
            **when,
            "project": spec.project,
            "spider": spec.spider,
            "args": [list(a) for a in spec.args],
            "settings": [list(s) for s in spec.settings],
            "workers": spec.workers,
            "overlap": spec.overlap,
            "dupefilter": dupefilter,
            "by": by,
        },
        redis_clock(client)(),
    )


def describe_when(record: dict[str, Any]) -> str:
    """``cron '0 3 * * *'`` or ``every 6h``."""
    return f"cron '{record['cron']}'" if record.get("cron") else f"every {record['every_text']}"


def get_schedule(client: redis.Redis, schedule_id: str) -> dict[str, Any]:
    raw = client.hget(job_keys(client).schedules, schedule_id) if schedule_id else None
    if raw is None:
        raise JobError(f"no schedule {schedule_id!r} (`crawlfleet schedule list` shows them)")
    return dict(json.loads(raw))


def list_schedules(client: redis.Redis) -> list[dict[str, Any]]:
    found = [json.loads(v) for v in client.hvals(job_keys(client).schedules)]
    return sorted(found, key=lambda s: int(s["id"]) if str(s["id"]).isdigit() else 0)


def remove_schedule(client: redis.Redis, schedule_id: str) -> bool:
    """True if it was there (removing it twice is a no-op)."""
    return bool(client.hdel(job_keys(client).schedules, schedule_id))


def set_paused(
    client: redis.Redis, schedule_id: str, paused: bool, now: float, by: str = ""
) -> bool:
    """Pause or resume; True when it changed (``changed_by`` records ``by``). A resumed
    schedule's next firing is recomputed from now (no catch-up of the occurrences it was paused
    for)."""
    record = get_schedule(client, schedule_id)
    if bool(record.get("paused")) == paused:
        return False
    record["paused"] = paused
    record["changed_by"] = by
    if not paused:
        record["next"] = next_fire(
            now=now, cron=record.get("cron", ""), every=record.get("every", 0)
        )
    client.hset(job_keys(client).schedules, schedule_id, json.dumps(record))
    return True


def pause_or_resume(client: redis.Redis, schedule_id: str, paused: bool, by: str) -> str:
    """``schedule pause|resume`` (the CLI and the dashboard): the line to show; idempotent."""
    changed = set_paused(client, schedule_id, paused, redis_clock(client)(), by)
    word = "paused" if paused else "resumed"
    return (
        f"{word} schedule {schedule_id}"
        if changed
        else f"schedule {schedule_id} was already {word}"
    )


def remove(client: redis.Redis, schedule_id: str) -> str:
    """``schedule remove``: the line to show; :class:`JobError` for an unknown id."""
    if not remove_schedule(client, schedule_id):
        get_schedule(client, schedule_id)  # unknown: one line
    return f"removed schedule {schedule_id}"


def spec_of(record: dict[str, Any]) -> control.JobSpec:
    return control.JobSpec(
        project=record["project"],
        spider=record["spider"],
        args=[tuple(a) for a in record.get("args", [])],
        settings=[tuple(s) for s in record.get("settings", [])],
        workers=record.get("workers"),
        overlap=bool(record.get("overlap")),
        fresh_dupefilter=record.get("dupefilter", "fresh") == "fresh",
        schedule=str(record["id"]),
    )


Starter = Callable[[redis.Redis, control.JobSpec, str, float], control.Outcome]


@dataclass
class ScheduleRunner:
    """Fires due schedules (module docstring); ``start`` starts a job (``control.start_job``)."""

    client: redis.Redis
    name: str
    clock: Callable[[], float] | None = None
    start: Starter = control.start_job
    timeout: float = control.DEFAULT_TIMEOUT

    def _lock(self) -> bool:
        key = job_keys(self.client).scheduler_lock
        if self.client.set(key, self.name, nx=True, px=LOCK_MS):
            return True
        if self.client.get(key) in (self.name, self.name.encode()):
            self.client.pexpire(key, LOCK_MS)
            return True
        return False

    def tick(self) -> list[str]:
        """Fire what is due; one line per schedule that fired or was skipped."""
        if not self._lock():
            return []
        now = (self.clock or redis_clock(self.client))()
        said = []
        for record in list_schedules(self.client):
            if record.get("paused") or float(record["next"]) > now:
                continue
            said.append(self._fire(record, now))
        return said

    def _fire(self, record: dict[str, Any], now: float) -> str:
        spec = spec_of(record)
        try:
            outcome = self.start(self.client, spec, f"schedule {record['id']}", self.timeout)
            result = outcome.message
            record["last_job"] = outcome.job
        except JobError as exc:
            result = f"skipped: {exc}"
        record["last"] = now
        record["last_result"] = result
        record["next"] = next_fire(
            now=now,
            cron=record.get("cron", ""),
            every=record.get("every", 0),
            previous=float(record["next"]),
        )
        # The schedule may have been removed or changed meanwhile: write only if still there.
        if self.client.hexists(job_keys(self.client).schedules, record["id"]):
            current = get_schedule(self.client, record["id"])
            current.update({k: record[k] for k in ("last", "last_job", "last_result", "next")})
            self.client.hset(job_keys(self.client).schedules, record["id"], json.dumps(current))
        return f"schedule {record['id']}: {result}"
