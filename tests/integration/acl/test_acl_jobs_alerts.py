"""The ACL users with jobs and alerts, tested by trying against a real redis-server started with
the rendered aclfile: a real `crawlfleet agent` (process runner) works as the crawler user, a job
runs from start to end through the CLI as the operator user, the dashboard user's alerts see the
hub's memory and the jobs, and each user is refused what its role does not need."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import redis
from acl_helpers import SPIDER, env
from support.crawl import Site
from support.lifecycle import running
from support.secureredis import SecureRedis, start_acl_redis
from support.waiting import wait_until

from crawlfleet.alerts.rules import AlertState
from crawlfleet.alerts.store import load_state, save_state
from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.jobs import control, schedules, store
from crawlfleet.views.hub import hub_snapshot

KEYS = JobKeys()
# NOPERM outside a script; inside one, Redis says the script's user "can't access" a key;
# Valkey 8 says "No permissions to access a key" in both
REFUSED = "(?i)no permissions|can't access|no permission"
FAST = [
    "-s", "SCHEDULER_LEASE_TIMEOUT=3", "-s", "SCHEDULER_HEARTBEAT_INTERVAL=0.3",
    "-s", "WORKERSTATS_INTERVAL=0.3", "-s", "BLOOMFILTER_CAPACITY=100000",
    "-s", "CONCURRENT_REQUESTS=2",
]  # fmt: skip


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRedis]:
    yield from running(start_acl_redis(tmp_path_factory.mktemp("acl-jobs"), [SPIDER]))


def client(hub: SecureRedis, role: str) -> redis.Redis:
    return redis.Redis.from_url(hub.url(role))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
    )


@pytest.fixture
def agent_watcher(hub: SecureRedis) -> redis.Redis:
    """Who watches the agents register (the conftest's ``start_agent``)."""
    return client(hub, "operator")


def test_a_job_runs_with_an_agent_as_crawler_and_the_cli_as_operator(
    hub: SecureRedis, site: Site, start_agent: Callable[[str], None]
) -> None:
    site.pages, site.delay = 30, 0.05
    start_agent("a")
    operator_url = hub.url("operator")
    started = cli(
        "job", "start", "classic", SPIDER, "-a", f"site={site.url}", "-a", "pages=30", *FAST,
        "--workers", "all", "--redis-url", operator_url,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("job 1: classic/pages running on 1 worker(s) (a)")
    paused = cli("job", "pause", "1", "--redis-url", operator_url)
    assert paused.returncode == 0, paused.stderr

    # the dashboard user's alerts see the hub's memory and the job that has not ended
    dashboard = client(hub, "dashboard")
    seen = hub_snapshot(dashboard, [])
    assert seen["used_memory"] and seen["used_memory"] > 0
    assert isinstance(seen["maxmemory"], int)
    assert [(j["id"], j["state"]) for j in seen["jobs"]] == [("1", "paused")]
    assert save_state(dashboard, AlertState())
    assert load_state(dashboard) is not None
    shown = cli("job", "show", "1", "--redis-url", hub.url("dashboard"))
    assert shown.returncode == 0 and "state: paused" in shown.stdout, shown.stderr

    resumed = cli("job", "resume", "1", "--redis-url", operator_url)
    assert resumed.returncode == 0, resumed.stderr
    operator = client(hub, "operator")
    wait_until(
        lambda: store.get_job(operator, "1")["state"] in ("finished", "failed"),
        "job 1 ended",
        timeout=90,
        interval=0.1,
    )
    record = store.get_job(operator, "1")
    assert record["state"] == "finished", record  # written by the agent, as the crawler user
    assert site.crawled() == site.expected()
    assert (record["stats"]["pages"], record["stats"]["items"]) == (30, 30)
    assert record["hosts"]["a"]["state"] == "exited"
    assert operator.sismember(KEYS.jobs_active, "1") == 0
    assert hub_snapshot(dashboard, [])["jobs"] == []


def test_the_crawler_user_cannot_create_jobs_schedules_or_alerts(hub: SecureRedis) -> None:
    crawler = client(hub, "crawler")
    operator = client(hub, "operator")
    operator.hset("accounts:demosite", "alice", "encrypted")
    operator.set(KEYS.alerts_state, "{}")
    operator.rpush(KEYS.ack("c1"), '{"ok": true}')
    for refused in (
        lambda: crawler.hgetall("accounts:demosite"),
        lambda: crawler.eval("return redis.call('HGETALL', KEYS[1])", 1, "accounts:demosite"),
        lambda: crawler.incr(KEYS.job_seq),  # a new job
        lambda: crawler.hset(KEYS.schedules, "9", "{}"),
        lambda: crawler.hgetall(KEYS.schedules),
        lambda: crawler.set(KEYS.scheduler_lock, "mallory"),
        lambda: crawler.get(KEYS.alerts_state),
        lambda: crawler.lrange(KEYS.ack("c1"), 0, -1),  # acks are write-only: no log lines
        lambda: crawler.set("crawlfleet:anything", "x"),
        lambda: crawler.hset("other:stats", "x", 1),  # a spider the ACL was not rendered for
        lambda: crawler.info(),
        lambda: crawler.keys("*"),
        lambda: crawler.config_get("*"),
        lambda: crawler.flushall(),
    ):
        with pytest.raises(redis.ResponseError, match=REFUSED):
            refused()
    # what an agent does is allowed, for any agent name: one user for every worker
    assert crawler.rpush(KEYS.commands("b"), "{}") == 1
    assert crawler.lpop(KEYS.commands("b")) == b"{}"


def test_the_hubs_scheduler_runs_as_operator_and_not_as_crawler(hub: SecureRedis) -> None:
    now = 1_767_225_600.0
    fired: list[str] = []

    def start(
        client: redis.Redis, spec: control.JobSpec, by: str, timeout: float
    ) -> control.Outcome:
        fired.append(spec.spider)
        return control.Outcome("1", f"job 1 by {by}")

    operator = client(hub, "operator")
    schedules.add_schedule(operator, {"project": "classic", "spider": SPIDER, "every": 60}, now)
    crawler = schedules.ScheduleRunner(
        client(hub, "crawler"), "hub", clock=lambda: now + 61, start=start
    )
    with pytest.raises(redis.ResponseError, match=REFUSED):
        crawler.tick()
    scheduler = schedules.ScheduleRunner(operator, "hub", clock=lambda: now + 61, start=start)
    assert scheduler.tick() == ["schedule 1: job 1 by schedule 1"]
    assert fired == [SPIDER]


def test_the_dashboard_user_writes_only_its_own_keys(hub: SecureRedis) -> None:
    dashboard = client(hub, "dashboard")
    client(hub, "operator").hset(KEYS.job("7"), "state", "running")
    assert dashboard.hget(KEYS.job("7"), "state") == b"running"
    assert dashboard.set(KEYS.alerts_state, "{}", px=60_000)
    assert dashboard.info("memory")["used_memory"] > 0
    for write in (
        lambda: dashboard.hset(KEYS.job("7"), "state", "finished"),
        lambda: dashboard.delete(KEYS.job("7")),
        lambda: dashboard.rpush(KEYS.job_history("7"), "{}"),
        lambda: dashboard.sadd(KEYS.jobs_active, "8"),
        lambda: dashboard.zadd(KEYS.jobs, {"8": 1}),
        lambda: dashboard.incr(KEYS.job_seq),
        lambda: dashboard.rpush(KEYS.commands("a"), "{}"),
        lambda: dashboard.zadd(KEYS.agents, {"a": 1}),
        lambda: dashboard.hset(KEYS.schedules, "9", "{}"),
        lambda: dashboard.set(KEYS.scheduler_lock, "x"),
        lambda: dashboard.set(SpiderKeys(SPIDER).paused, "1"),
        lambda: dashboard.eval("return redis.call('SET', KEYS[1], 'x')", 1, KEYS.job("7")),
        lambda: dashboard.set("crawlfleet:anything", "x"),
        lambda: dashboard.get("crawlfleet:check:probe"),
        lambda: dashboard.hgetall("accounts:demosite"),
        lambda: dashboard.keys("*"),
        lambda: dashboard.config_get("*"),
        lambda: dashboard.config_set("maxmemory", "1"),
        lambda: dashboard.flushall(),
        lambda: dashboard.client_list(),
        lambda: dashboard.slowlog_get(),
    ):
        with pytest.raises(redis.ResponseError, match=REFUSED):
            write()
    # redis-server refuses DEBUG itself (enable-debug-command) before the ACL is asked
    with pytest.raises(redis.ResponseError):
        dashboard.execute_command("DEBUG", "SLEEP", "0")
