"""Schedules: fired by the scheduler with an injected clock (catch-up once, restart, pause, one
scheduler at a time) against real redis-server, and by a real hub agent (`--schedules`) that
starts a real crawl, skipping while a job of the spider still runs."""

from __future__ import annotations

from collections.abc import Callable

import redis
from jobs_helpers import FAST, AgentProcess, cli, job, wait_state
from support.crawl import Site
from support.waiting import wait_until

from crawlfleet.jobs import control, schedules, store
from crawlfleet.jobs.schedules import ScheduleRunner

DAY = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Starts:
    """The scheduler's ``start``: records what it was asked to start."""

    def __init__(self) -> None:
        self.specs: list[control.JobSpec] = []

    def __call__(
        self, client: redis.Redis, spec: control.JobSpec, by: str, timeout: float
    ) -> control.Outcome:
        self.specs.append(spec)
        return control.Outcome(str(len(self.specs)), f"job {len(self.specs)} by {by}")


def _add(client: redis.Redis, now: float, **when: object) -> dict[str, object]:
    fields = {"project": "classic", "spider": "pages", "dupefilter": "fresh", **when}
    return schedules.add_schedule(client, fields, now)


def test_a_scheduler_back_after_downtime_catches_up_once_and_keeps_the_phase(
    redis_client: redis.Redis,
) -> None:
    clock, starts = Clock(T0), Starts()
    every = _add(redis_client, T0, every=3600)
    cron = _add(redis_client, T0, cron="0 3 * * *")
    assert (every["next"], cron["next"]) == (T0 + 3600, T0 + 3 * 3600)
    scheduler = ScheduleRunner(redis_client, "hub", clock=clock, start=starts)
    assert scheduler.tick() == []
    clock.now = T0 + 3 * DAY + 1800  # down for three days: 72 hourly and 3 daily times missed
    fired = scheduler.tick()
    assert fired == ["schedule 1: job 1 by schedule 1", "schedule 2: job 2 by schedule 2"]
    assert [s.schedule for s in starts.specs] == ["1", "2"]
    assert starts.specs[0].fresh_dupefilter and not starts.specs[0].overlap
    again = ScheduleRunner(redis_client, "hub", clock=clock, start=starts)  # a restarted hub
    assert again.tick() == []
    first, second = schedules.list_schedules(redis_client)
    assert first["next"] == T0 + 3 * DAY + 3600  # on the hour, as before the downtime
    assert second["next"] == T0 + 3 * DAY + 3 * 3600  # 03:00 the next day
    assert (first["last"], first["last_job"]) == (clock.now, "1")


def test_paused_schedules_do_not_fire_and_resume_from_now(redis_client: redis.Redis) -> None:
    clock, starts = Clock(T0), Starts()
    record = _add(redis_client, T0, every=60)
    scheduler = ScheduleRunner(redis_client, "hub", clock=clock, start=starts)
    assert schedules.set_paused(redis_client, str(record["id"]), True, T0)
    assert not schedules.set_paused(redis_client, str(record["id"]), True, T0)  # a no-op
    clock.now = T0 + 600
    assert scheduler.tick() == [] and starts.specs == []
    assert schedules.set_paused(redis_client, str(record["id"]), False, clock.now)
    assert schedules.get_schedule(redis_client, "1")["next"] == T0 + 660
    clock.now = T0 + 660
    assert len(scheduler.tick()) == 1


def test_one_scheduler_at_a_time_and_a_failed_start_is_recorded(
    redis_client: redis.Redis,
) -> None:
    clock = Clock(T0 + 120)
    _add(redis_client, T0, every=60)
    other = ScheduleRunner(redis_client, "other-hub", clock=clock, start=Starts())
    real = ScheduleRunner(redis_client, "hub", clock=clock)  # control.start_job: no agent anywhere
    assert real.tick() == ["schedule 1: skipped: no agent has registered a project yet (is "
                           "`crawlfleet agent` running?)"]  # fmt: skip
    assert other.tick() == []  # "hub" holds the lock
    assert store.list_jobs(redis_client) == []
    assert schedules.get_schedule(redis_client, "1")["next"] == T0 + 180


def test_the_hub_agent_fires_a_schedule_that_waits_for_the_running_job(
    site: Site,
    redis_url: str,
    redis_client: redis.Redis,
    start_agent: Callable[..., AgentProcess],
) -> None:
    site.pages, site.delay = 400, 0.1
    url = ("--redis-url", redis_url)
    start_agent("a", "--schedules")
    long = cli("job", "start", "classic", "pages", "-a", f"site={site.url}", "-a", "pages=400",
               *FAST, *url)  # fmt: skip
    assert long.code == 0, long.err
    added = cli("schedule", "add", "classic", "pages", "--every", "1s", "-a", f"site={site.url}",
                "-a", "pages=20", *FAST, *url)  # fmt: skip
    assert added.code == 0, added.err
    assert added.out.startswith("schedule 1: classic/pages every 1s, fresh duplicate filter")

    def skipped() -> bool:
        result = schedules.get_schedule(redis_client, "1").get("last_result") or ""
        return result.startswith("skipped: job 1 of pages is running")

    wait_until(skipped, "the schedule skipped while job 1 runs", timeout=60)
    assert [j["id"] for j in store.list_jobs(redis_client)] == ["1"]
    assert cli("schedule", "pause", "1", *url).out.strip() == "paused schedule 1"
    assert cli("job", "stop", "1", *url).code == 0
    assert cli("purge", "pages", "--yes", *url).code == 0
    site.hits.clear()
    site.pages = 20
    assert cli("schedule", "resume", "1", *url).out.strip() == "resumed schedule 1"

    def scheduled_job() -> bool:
        return bool(schedules.get_schedule(redis_client, "1").get("last_job"))

    wait_until(scheduled_job, "the schedule fired a job", timeout=60)
    job_id = str(schedules.get_schedule(redis_client, "1")["last_job"])
    record = wait_state(redis_client, job_id, "finished", "failed")
    assert record["state"] == "finished", record
    assert (record["by"], record["schedule"], record["dupefilter"]) == ("schedule 1", "1", "fresh")
    assert record["stats"]["pages"] == 20
    assert site.crawled() == site.expected()
    listed = cli("schedule", "list", *url)
    assert listed.out.startswith("   1 classic/pages every 1s next ")
    assert cli("schedule", "remove", "1", *url).out.strip() == "removed schedule 1"
    assert job(redis_client, "1")["state"] == "finished"
