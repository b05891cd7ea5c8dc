"""Jobs on loopback: real `crawlfleet agent` processes (process runner) start real `scrapy crawl`
workers of the classic test project; the job is started, paused, resumed and stopped through the
real CLI, and its record outlives the crawl's keys."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import redis
from jobs_helpers import FAST, AgentProcess, cli, job, pids_alive, wait_state
from support.crawl import Site, wait_heartbeats
from support.waiting import wait_until

from crawlfleet.hub.fleetkeys import JobKeys
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.views.crawl import spider_snapshot


def test_a_job_runs_pauses_resumes_and_keeps_its_record_after_the_purge(
    site: Site,
    redis_url: str,
    redis_client: redis.Redis,
    start_agent: Callable[..., AgentProcess],
) -> None:
    site.pages, site.delay = 60, 0.1
    start_agent("a")
    start_agent("b")
    started = cli(
        "job", "start", "classic", "pages", "-a", f"site={site.url}", "-a", "pages=60",
        *FAST, "-s", "CONCURRENT_REQUESTS=1", "--workers", "all", "--redis-url", redis_url,
    )  # fmt: skip
    assert started.code == 0, started.err
    assert started.out.startswith("job 1: classic/pages running on 2 worker(s) (a, b)")
    record = job(redis_client, "1")
    assert record["state"] == "running" and record["workers"] == ["a", "b"]
    assert {h["state"] for h in record["hosts"].values()} == {"running"}
    wait_until(lambda: len(site.crawled()) >= 4, "the crawl under way", timeout=60)

    paused = cli("job", "pause", "1", "--redis-url", redis_url)
    assert paused.code == 0 and paused.out.startswith("paused job 1"), paused.err
    assert json.loads(redis_client.get(SpiderKeys("pages").paused) or "{}")["job"] == "1"
    again = cli("job", "pause", "1", "--redis-url", redis_url)
    assert (again.code, again.out.strip()) == (0, "job 1 was already paused")
    wait_heartbeats(redis_client, 3, workers=2, spider="pages")
    held = len(site.crawled())
    wait_heartbeats(redis_client, 3, workers=2, spider="pages")
    assert len(site.crawled()) == held < site.pages
    assert job(redis_client, "1")["state"] == "paused"

    resumed = cli("job", "resume", "1", "--redis-url", redis_url)
    assert resumed.code == 0 and resumed.out.startswith("resumed job 1"), resumed.err
    assert not redis_client.exists(SpiderKeys("pages").paused)
    record = wait_state(redis_client, "1", "finished", "failed")
    assert record["state"] == "finished", record
    assert site.crawled() == site.expected()
    stats = record["stats"]
    assert (stats["pages"], stats["items"], stats["errors"]) == (60, 60, 0)
    shares = stats["per_worker"]
    assert set(shares) == {"a", "b"}
    assert sum(s["pages"] for s in shares.values()) == 60
    assert abs(sum(s["share"] for s in shares.values()) - 1) < 0.01
    assert stats["duration"] > 0 and int(record["ended"]) >= int(record["started"])
    assert {h["state"] for h in record["hosts"].values()} == {"exited"}
    assert pids_alive(record) == []

    purged = cli("purge", "pages", "--yes", "--redis-url", redis_url)
    assert purged.code == 0, purged.err
    # every key of the crawl is gone but what its politeness keys learned of the site
    left = {k.decode() for k in redis_client.scan_iter(match=SpiderKeys("pages").glob)}
    assert left and all(k.startswith("pages:politeness:") for k in left), left
    assert f"{len(left)} politeness key(s) kept" in purged.out
    shown = cli("job", "show", "1", "--redis-url", redis_url)
    assert shown.code == 0
    assert "state: finished" in shown.out and "pages: 60  items: 60" in shown.out
    listed = cli("job", "list", "--redis-url", redis_url)
    assert listed.out.splitlines()[1].split()[:3] == ["1", "finished", "classic/pages"]
    assert redis_client.sismember(JobKeys().jobs_active, "1") == 0


def test_stop_drains_and_two_operators_stopping_is_a_no_op_for_the_second(
    site: Site,
    redis_url: str,
    redis_client: redis.Redis,
    start_agent: Callable[..., AgentProcess],
) -> None:
    site.pages, site.delay = 400, 0.1
    start_agent("a")
    start_agent("b")
    started = cli(
        "job", "start", "classic", "pages", "-a", f"site={site.url}", "-a", "pages=400",
        *FAST, "--redis-url", redis_url,
    )  # fmt: skip
    assert started.code == 0, started.err
    wait_until(lambda: len(site.crawled()) >= 6, "the crawl under way", timeout=60)
    results: dict[int, object] = {}

    def stop(i: int) -> None:
        results[i] = cli("job", "stop", "1", "--redis-url", redis_url)

    threads = [threading.Thread(target=stop, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    outs = sorted(r.out.strip() for r in results.values())  # type: ignore[attr-defined]
    assert all(r.code == 0 for r in results.values()), outs  # type: ignore[attr-defined]
    assert sum(o.startswith("job 1 stopped (finished)") for o in outs) == 1, outs
    assert sum("already" in o for o in outs) == 1, outs
    record = wait_state(redis_client, "1", "finished", "failed")
    assert record["state"] == "finished" and record["stopped_by"], record
    assert {h["state"] for h in record["hosts"].values()} <= {"stopped", "exited"}
    assert pids_alive(record) == []
    keys = SpiderKeys("pages")
    # Drained: nothing leased, what was not crawled is back in the queue, the pause released.
    view = spider_snapshot(redis_client, "pages")
    assert view["queued"] > 0 and view["leased"] == 0
    assert not redis_client.exists(keys.paused)
    assert 0 < record["stats"]["pages"] <= len(site.crawled()) < site.pages
    third = cli("job", "stop", "1", "--redis-url", redis_url)
    assert (third.code, third.out.strip()) == (0, "job 1 has already ended (finished)")
