"""The alert rules on real state in a real redis-server, under an injected clock.

Each rule fires on the keys the fleet really writes (a job record and its workers' statistics,
the dead-letter list, workers' ``proxy/banned``, a small ``maxmemory`` set with CONFIG SET, real
job agents killed or stopped) and resolves; the state that says "since when" lives in Redis
between evaluations, as it does between ``crawlfleet status`` runs and the dashboard.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from ops_helpers import cli
from support.secureredis import start_acl_redis
from support.services import stop_process
from support.waiting import wait_until

from crawlfleet.alerts import rules
from crawlfleet.alerts.store import current_alerts, load_state
from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.jobs import store
from crawlfleet.views.cluster import cluster_snapshot

SPIDER = "site"
K = SpiderKeys(SPIDER)
STATE_KEY = JobKeys().alerts_state


def _worker(client: redis.Redis, wid: str, host: str, pid: int, pages: int, bans: int) -> None:
    """A worker as the frontier and the worker stats extension write it (alive for 60 s)."""
    now = store.now_ms(client)
    client.hset(K.frontier, mapping={"queue_class": "x.FifoQueue"})
    client.zadd(K.workers, {wid: now + 60_000})
    client.hset(
        K.worker(wid),
        mapping={"info": json.dumps({"host": host, "pid": pid}), "heartbeat": now},
    )
    client.zadd(K.ops_workers, {wid: now})
    client.hset(K.ops_scrapy(wid), mapping={"response_received_count": pages, "proxy/banned": bans})


def _alerts(client: redis.Redis, url: str, now: float) -> dict[str, rules.Alert]:
    view = cluster_snapshot(client, url)
    return {a.name: a for a in current_alerts(client, view, now=now)}


def _running_job(client: redis.Redis) -> str:
    store.register_agent(
        client, "b", {"host": "hostb", "spiders": {SPIDER: "proj"}}, 60_000, units={}
    )
    job_id = store.create_job(
        client, {"project": "proj", "spider": SPIDER, "workers": ["b"], "by": "test"}
    )
    store.set_host(client, job_id, "b", state="running", pids=[4242])
    store.transition(client, job_id, ["pending"], "running", started=store.now_ms(client))
    return job_id


def test_a_running_job_without_progress_is_stuck_until_its_pages_grow(
    redis_client: redis.Redis, redis_url: str
) -> None:
    job_id = _running_job(redis_client)
    _worker(redis_client, "w1", "hostb", 4242, pages=5, bans=0)
    t0 = store.now_ms(redis_client) / 1000.0
    assert rules.JOB_STUCK not in _alerts(redis_client, redis_url, t0)
    stored = load_state(redis_client)
    assert stored is not None and stored.jobs == {job_id: [5.0, t0]}
    assert rules.JOB_STUCK not in _alerts(redis_client, redis_url, t0 + rules.STUCK_AFTER - 1)
    stuck = _alerts(redis_client, redis_url, t0 + rules.STUCK_AFTER)[rules.JOB_STUCK]
    assert dict(stuck.labels) == {"job_id": job_id, "spider": SPIDER}
    assert stuck.since == t0 and "have not grown for 15 minutes" in stuck.summary

    redis_client.hset(K.ops_scrapy("w1"), "response_received_count", 6)
    later = t0 + rules.STUCK_AFTER + 30
    assert rules.JOB_STUCK not in _alerts(redis_client, redis_url, later)
    # Paused is not stuck, however long; resumed, it counts from the resume.
    store.transition(redis_client, job_id, ["running"], "paused")
    assert rules.JOB_STUCK not in _alerts(redis_client, redis_url, later + 5 * rules.STUCK_AFTER)
    store.transition(redis_client, job_id, ["paused"], "running")
    resumed = later + 5 * rules.STUCK_AFTER
    assert rules.JOB_STUCK not in _alerts(redis_client, redis_url, resumed)
    assert rules.JOB_STUCK in _alerts(redis_client, redis_url, resumed + rules.STUCK_AFTER)


def test_a_job_that_never_crawled_a_page_counts_from_its_start(
    redis_client: redis.Redis, redis_url: str
) -> None:
    _running_job(redis_client)
    _worker(redis_client, "w1", "hostb", 4242, pages=0, bans=0)
    started = store.now_ms(redis_client) / 1000.0
    # The first evaluation ever (no state) already knows: nothing since the start.
    assert rules.JOB_STUCK in _alerts(redis_client, redis_url, started + rules.STUCK_AFTER + 1)


def test_dead_letters_growing_fire_and_resolve_after_the_window(
    redis_client: redis.Redis, redis_url: str
) -> None:
    _worker(redis_client, "w1", "hostb", 1, pages=1, bans=0)
    redis_client.rpush(K.deadletter, "junk-1")
    t0 = 1_000_000.0
    assert rules.DEADLETTER_GROWING not in _alerts(redis_client, redis_url, t0)  # the baseline
    assert rules.DEADLETTER_GROWING not in _alerts(redis_client, redis_url, t0 + 10)
    redis_client.rpush(K.deadletter, "junk-2", "junk-3")
    growing = _alerts(redis_client, redis_url, t0 + 20)[rules.DEADLETTER_GROWING]
    assert growing.value == 3 and growing.since == t0 + 20
    redis_client.rpush(K.deadletter, "junk-4")
    again = _alerts(redis_client, redis_url, t0 + 100)[rules.DEADLETTER_GROWING]
    assert again.since == t0 + 20  # one episode
    quiet = t0 + 100 + rules.DEADLETTER_WINDOW
    assert rules.DEADLETTER_GROWING not in _alerts(redis_client, redis_url, quiet)
    # requeue-failed style shrinking never fires.
    redis_client.ltrim(K.deadletter, 0, 0)
    assert rules.DEADLETTER_GROWING not in _alerts(redis_client, redis_url, quiet + 10)


def test_a_ban_storm_fires_on_new_bans_and_resolves_when_they_stop(
    redis_client: redis.Redis, redis_url: str
) -> None:
    _worker(redis_client, "w1", "hostb", 1, pages=1, bans=500)  # old bans: not a storm
    _worker(redis_client, "w2", "hostc", 2, pages=1, bans=0)
    t0 = 2_000_000.0
    assert rules.BAN_STORM not in _alerts(redis_client, redis_url, t0)
    redis_client.hset(K.ops_scrapy("w1"), "proxy/banned", 530)
    redis_client.hset(K.ops_scrapy("w2"), "proxy/banned", 10)
    assert rules.BAN_STORM not in _alerts(redis_client, redis_url, t0 + 60)  # 40 bans
    redis_client.hset(K.ops_scrapy("w2"), "proxy/banned", 20)
    storm = _alerts(redis_client, redis_url, t0 + 120)[rules.BAN_STORM]
    assert storm.value == 50 and dict(storm.labels) == {"spider": SPIDER}
    assert storm.since == t0 + 60
    assert rules.BAN_STORM not in _alerts(redis_client, redis_url, t0 + 60 + rules.BAN_WINDOW)


def test_the_hub_near_maxmemory_fires_and_resolves(own_redis: Any) -> None:
    client = own_redis.client()
    try:
        t0 = 3_000_000.0
        assert rules.HUB_MEMORY not in _alerts(client, own_redis.url, t0)  # maxmemory 0
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", str(int(used / 0.92)))
        near = _alerts(client, own_redis.url, t0 + 1)[rules.HUB_MEMORY]
        assert near.severity == "critical" and near.value >= rules.MEMORY_RATIO
        assert _alerts(client, own_redis.url, t0 + 9)[rules.HUB_MEMORY].since == t0 + 1
        # Past maxmemory Redis refuses the state's write: the alert fires all the same.
        client.config_set("maxmemory", str(used // 2))
        full = _alerts(client, own_redis.url, t0 + 10)[rules.HUB_MEMORY]
        assert full.value > 1 and "of its maxmemory" in full.summary
        client.config_set("maxmemory", str(used * 100))
        assert rules.HUB_MEMORY not in _alerts(client, own_redis.url, t0 + 11)
    finally:
        client.close()


def test_status_shows_the_alerts_and_survives_a_broken_state(
    redis_client: redis.Redis, redis_url: str
) -> None:
    now = store.now_ms(redis_client)
    redis_client.hset(K.frontier, mapping={"queue_class": "x.FifoQueue"})
    redis_client.zadd(K.workers, {"dead:1:x": now - 5_000})  # its deadline passed 5 s ago
    redis_client.hset(
        K.worker("dead:1:x"),
        mapping={"info": json.dumps({"host": "hostd", "pid": 1}), "heartbeat": now - 8_000},
    )
    redis_client.set(STATE_KEY, "{not json")
    # One spider's view shows its alerts and leaves the state (the other spiders') alone.
    one = cli("status", SPIDER, "--json", "--redis-url", redis_url)
    assert [a["name"] for a in json.loads(one.out)["alerts"]] == [rules.WORKER_GONE]
    assert redis_client.get(STATE_KEY) == b"{not json"
    shown = cli("status", "--json", "--redis-url", redis_url)
    assert shown.code == 0, shown.err
    (gone,) = json.loads(shown.out)["alerts"]
    assert gone["name"] == rules.WORKER_GONE and gone["severity"] == "warning"
    assert gone["labels"] == {"spider": SPIDER, "worker": "dead:1:x", "host": "hostd"}
    assert gone["key"] == "CrawlfleetWorkerGone{spider=site,worker=dead:1:x,host=hostd}"
    assert abs(gone["since"] - (now - 5_000) / 1000.0) < 2
    stored = load_state(redis_client)
    assert stored is not None and stored.deadletter == {SPIDER: [0.0, None, None]}  # rewritten
    human = cli("status", "--redis-url", redis_url)
    assert "alerts: 1 active" in human.out and "dead:1:x of site missed its heartbeat" in human.out
    # A worker that left cleanly is no alert.
    redis_client.zrem(K.workers, "dead:1:x")
    redis_client.hset(K.worker("dead:1:x"), "stopped", now)
    assert json.loads(cli("status", "--json", "--redis-url", redis_url).out)["alerts"] == []
    assert "alerts: none" in cli("status", "--redis-url", redis_url).out
    redis_client.delete(STATE_KEY)
    redis_client.lpush(STATE_KEY, "another type")
    assert cli("status", "--json", "--redis-url", redis_url).code == 0


def test_the_acl_dashboard_user_keeps_its_own_state(tmp_path: Path) -> None:
    """The ACL's ``dashboard`` user reads the spiders' keys, the job records and ``INFO`` (for the
    hub's memory), and writes only the alerts' state: its alerts work like the operator's."""
    server = start_acl_redis(tmp_path, [SPIDER])
    try:
        operator = redis.Redis.from_url(server.url("operator"))
        _worker(operator, "w1", "hostb", 1, pages=1, bans=0)
        dashboard = redis.Redis.from_url(server.url("dashboard"))
        local = rules.AlertState()

        def alerts(now: float) -> dict[str, rules.Alert]:
            view = cluster_snapshot(dashboard, server.url("dashboard"))
            assert view["hub"]["used_memory"] > 0 and view["hub"]["jobs"] == []
            return {a.name: a for a in current_alerts(dashboard, view, now=now, local=local)}

        assert alerts(100.0) == {}
        operator.hset(K.ops_scrapy("w1"), "proxy/banned", rules.BAN_STORM_BANS)
        assert rules.BAN_STORM in alerts(110.0)
        assert operator.exists(STATE_KEY) == 1  # the one key it may write
        with pytest.raises(redis.exceptions.NoPermissionError):
            dashboard.set(K.ops_scrapy("w1"), "x")  # and nothing else
        dashboard.close()
        operator.close()
    finally:
        server.stop()


def test_a_killed_job_agent_is_down_until_it_is_back_and_one_stopped_cleanly_is_not(
    redis_client: redis.Redis, redis_url: str, run_agent: Any
) -> None:
    gone, retired = run_agent(redis_url, "gone"), run_agent(redis_url, "retired")
    assert json.loads(cli("status", "--json", "--redis-url", redis_url).out)["alerts"] == []
    gone.kill()  # SIGKILL: no clean stop, its liveness deadline (3 s) passes
    assert stop_process(retired) == 0  # SIGTERM: a clean stop, a host being retired
    wait_until(
        lambda: not any(a.alive for a in store.agents(redis_client)), what="both agents not alive"
    )
    shown = cli("status", "--json", "--redis-url", redis_url)
    assert shown.code == 0, shown.err
    view = json.loads(shown.out)
    host = socket.gethostname()
    agents = {a["name"]: a for a in view["hub"]["agents"]}
    assert agents["gone"]["stopped"] is False and agents["gone"]["alive"] is False
    assert agents["retired"]["stopped"] is True and agents["retired"]["deadline"] is None
    assert agents["gone"]["host"] == host and agents["gone"]["runner"] == "process"
    (down,) = view["alerts"]
    assert down["name"] == rules.AGENT_DOWN and down["severity"] == "warning"
    assert down["labels"] == {"agent": "gone", "host": host}
    assert down["key"] == f"CrawlfleetAgentDown{{agent=gone,host={host}}}"
    deadline = agents["gone"]["deadline"]
    assert down["since"] == deadline <= view["hub"]["time"]
    assert down["value"] >= 3.0  # seconds since its last heartbeat: past its TTL
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline))
    summary = f"job agent gone on {host} is down since {stamp}: no job can start there"
    assert down["summary"] == summary
    human = cli("status", "--redis-url", redis_url)
    assert "alerts: 1 active" in human.out
    assert f"CrawlfleetAgentDown: job agent gone on {host} is down since {stamp}" in human.out
    # The same rule under an injected clock: the deadline says since when, whatever the time.
    later = cluster_snapshot(redis_client, redis_url)
    (again,) = current_alerts(redis_client, later, now=deadline + 3600)
    assert again.key == down["key"] and again.since == deadline

    run_agent(redis_url, "gone")  # back: the alert resolves
    assert json.loads(cli("status", "--json", "--redis-url", redis_url).out)["alerts"] == []
    assert "alerts: none" in cli("status", "--redis-url", redis_url).out
