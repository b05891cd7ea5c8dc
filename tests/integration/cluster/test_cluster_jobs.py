"""A crawl job on a real six-node Redis Cluster (``redis+cluster://``): a real `crawlfleet agent`
registers, `crawlfleet job start` has it start a `scrapy crawl` of the classic test project, the
job ends ``finished`` with its numbers (``job list``, ``status``'s agents and the dashboard's
``/api/jobs`` show it, with a schedule added and paused), pausing and resuming it work, and
every job, schedule and agent key sits in the slot of the fleet's tag ``{crawlfleet}``, every key
of the crawl in that of ``{pages}``.
"""

from __future__ import annotations

from pathlib import Path

from redis.crc import key_slot
from support.agents import SPIDER, launch_agent
from support.cli import cli_process
from support.crawl import Site
from support.dashboard import KEY, start_dashboard
from support.rediscluster import RedisClusterGroup
from support.waiting import wait_until

from crawlfleet.jobs import store

__all__ = ["start_dashboard"]  # a fixture

FAST = ["-s", "SCHEDULER_LEASE_TIMEOUT=3", "-s", "SCHEDULER_HEARTBEAT_INTERVAL=0.3"]
FAST += ["-s", "WORKERSTATS_INTERVAL=0.3", "-s", "CONCURRENT_REQUESTS=1"]


def test_an_agent_runs_a_job_on_the_cluster(
    site: Site, cluster: RedisClusterGroup, tmp_path: Path, start_dashboard
) -> None:
    url = cluster.url()
    client = cluster.client()
    agent = launch_agent(url, "a", tmp_path, client)
    try:
        site.pages, site.delay = 30, 0.1
        started = cli_process(
            "job", "start", "classic", SPIDER, "-a", f"site={site.url}", "-a", "pages=30",
            *FAST, "--workers", "all", "--redis-url", url,
        )  # fmt: skip
        assert started.code == 0, started.err
        assert started.out.startswith("job 1: classic/pages running on 1 worker(s) (a)")
        wait_until(lambda: len(site.crawled()) >= 3, "the crawl under way", timeout=60)
        paused = cli_process("job", "pause", "1", "--redis-url", url)
        assert paused.code == 0 and client.exists("{pages}:paused") == 1, paused.err
        assert store.get_job(client, "1")["state"] == "paused"
        resumed = cli_process("job", "resume", "1", "--redis-url", url)
        assert resumed.code == 0 and client.exists("{pages}:paused") == 0, resumed.err

        def ended() -> bool:
            return store.get_job(client, "1")["state"] in store.ENDED

        wait_until(ended, "job 1 to end", timeout=90)
        record = store.get_job(client, "1")
        assert record["state"] == "finished", (record, agent.tail())
        assert site.crawled() == site.expected()
        assert (record["stats"]["pages"], record["stats"]["items"]) == (30, 30)
        listed = cli_process("job", "list", "--redis-url", url)
        assert listed.out.splitlines()[1].split()[:3] == ["1", "finished", "classic/pages"]
        status = cli_process("status", "--json", "--redis-url", url)
        assert [a["name"] for a in status.json()["hub"]["agents"]] == ["a"], status.err
        added = cli_process(
            "schedule", "add", "classic", SPIDER, "--every", "1d", "--redis-url", url
        )
        assert added.out.startswith("schedule 1: classic/pages every 1d"), added.err
        paused_schedule = cli_process("schedule", "pause", "1", "--redis-url", url)
        assert paused_schedule.code == 0, paused_schedule.err
        jobs = start_dashboard(url).get("/api/jobs", headers={"X-API-Key": KEY})
        assert jobs.status_code == 200, jobs.text
        assert [(j["id"], j["state"]) for j in jobs.json()["jobs"]] == [("1", "finished")]
        assert [(r["id"], r["paused"]) for r in jobs.json()["schedules"]] == [("1", True)]
    finally:
        agent.stop()
        client.close()
    keys = [k for node in cluster.keys_by_node().values() for k in node]
    fleet = [k for k in keys if k.startswith("{crawlfleet}:")]
    crawl = [k for k in keys if k.startswith("{pages}:")]
    assert sorted(fleet + crawl) == sorted(keys), keys
    assert "{crawlfleet}:job:1" in fleet and "{crawlfleet}:agents" in fleet
    assert {key_slot(k.encode()) for k in fleet} == {key_slot(b"{crawlfleet}")}
    assert {key_slot(k.encode()) for k in crawl} == {key_slot(b"{pages}")}
