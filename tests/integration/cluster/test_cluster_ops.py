"""The operator side on a real six-node Redis Cluster (``redis+cluster://``): after a crawl ran
there, ``crawlfleet check``, ``status`` (and ``--json``), ``seed``, ``export``, ``requeue-failed``,
``bloom-info``, ``pause``/``resume`` and ``purge`` find it under its hash tag ``{site}``, and the
dashboard's page, JSON and ``/metrics`` answer with it (its sampler's series in the crawl's
slot). The shared cluster is emptied before each test.
"""

from __future__ import annotations

from pathlib import Path

from redis.crc import key_slot
from support.cli import cli
from support.crawl import Site, frontier_settings
from support.dashboard import KEY, start_dashboard
from support.rediscluster import RedisClusterGroup
from support.waiting import wait_until

__all__ = ["start_dashboard"]  # a fixture

ITEMS = "crawlfleet.pipelines.RedisItemsPipeline"
WORKERSTATS = "crawlfleet.extensions.workerstats.WorkerStats"
BLOOM = "crawlfleet.frontier.dupefilter.BloomDupeFilter"


def crawl(site: Site, start_worker, cluster: RedisClusterGroup) -> str:
    """One worker crawls the site on the cluster (a Bloom filter, items, two broken links that
    end in ``{site}:failed``); the cluster URL."""
    url = cluster.url()
    site.pages, site.broken_links = 20, 2
    settings = frontier_settings(
        url,
        DUPEFILTER_CLASS=BLOOM,
        BLOOMFILTER_CAPACITY=10_000,
        EXTENSIONS={WORKERSTATS: 500},
        WORKERSTATS_INTERVAL=0.3,
        ITEM_PIPELINES={ITEMS: 300},
    )
    worker = start_worker(site.url, settings, style="start_mixed")  # three items
    assert worker.wait(120) == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    return url


def test_the_operator_commands_work_on_the_cluster(
    site: Site, start_worker, cluster: RedisClusterGroup, tmp_path: Path
) -> None:
    url = crawl(site, start_worker, cluster)
    client = cluster.client()

    checked = cli("check", "--json", "--redis-url", url)
    assert checked.code == 0 and checked.json()["ok"] is True, checked.out + checked.err

    view = cli("status", "--json", "--redis-url", url)
    assert view.code == 0, view.err
    (spider,) = view.json()["spiders"]
    assert spider["spider"] == "site"
    assert spider["queue_key"] == "{site}:requests"
    assert spider["acked"] == site.pages and spider["items"] == 3
    assert spider["failed"] == 2 and spider["queued"] == 0
    assert spider["dupefilter"]["key"] == "{site}:bloomfilter"
    assert spider["dupefilter"]["fingerprints"] > 0
    assert len(spider["workers"]) == 1 and spider["workers"][0]["pages"] > 0
    assert "error" not in view.err.lower()
    text = cli("status", "--redis-url", url)
    assert text.code == 0 and "site" in text.out, text.err
    one = cli("status", "site", "--json", "--redis-url", url)
    assert one.code == 0 and one.json()["spiders"][0]["spider"] == "site", one.err
    unknown = cli("status", "nope", "--redis-url", url)
    assert unknown.code == 1 and "known: site" in unknown.err, unknown.err

    bloom = cli("bloom-info", "site", "--json", "--redis-url", url)
    assert bloom.code == 0, bloom.err
    assert bloom.json()["key"] == "{site}:bloomfilter" and bloom.json()["count_estimate"] > 0

    out = tmp_path / "items.jsonl"
    exported = cli("export", "site", "-o", str(out), "--redis-url", url)
    assert exported.code == 0, exported.err
    assert len(out.read_text().splitlines()) == 3

    seeded = cli("seed", "site", f"{site.url}/p/3", "--redis-url", url)
    assert seeded.code == 0 and "{site}:start_urls" in seeded.out, seeded.err
    assert client.lrange("{site}:start_urls", 0, -1) == [f"{site.url}/p/3".encode()]

    elsewhere = cli("requeue-failed", "site", "--queue-key", "site:requests", "--redis-url", url)
    assert elsewhere.code != 0 and "outside the crawl's hash slot" in elsewhere.err
    assert len(elsewhere.err.strip().splitlines()) == 1 and "Traceback" not in elsewhere.err
    foreign = cli("export", "site", "-o", str(out), "--key", "all-items", "--redis-url", url)
    assert foreign.code != 0 and "outside the crawl's hash slot" in foreign.err, foreign.err
    requeued = cli("requeue-failed", "site", "--redis-url", url)
    assert requeued.code == 0, requeued.err
    assert "requeued 2 failed request(s) of site into {site}:requests" in requeued.out
    assert client.llen("{site}:failed") == 0 and client.zcard("{site}:requests") == 2

    paused = cli("pause", "site", "--redis-url", url)
    assert paused.code == 0 and client.exists("{site}:paused") == 1, paused.err
    assert cli("status", "--json", "--redis-url", url).json()["spiders"][0]["paused"] is True
    resumed = cli("resume", "site", "--redis-url", url)
    assert resumed.code == 0 and client.exists("{site}:paused") == 0, resumed.err

    # the crawl's keys in its slot; the one other key is status's alert state, under the fleet's
    by_node = cluster.keys_by_node()
    keys = [k for node in by_node.values() for k in node if k != "{crawlfleet}:alerts:state"]
    assert all(k.startswith("{site}:") for k in keys), by_node
    assert {key_slot(k.encode()) for k in keys} == {key_slot(b"{site}")}, by_node
    purged = cli("purge", "site", "--yes", "--redis-url", url)
    assert purged.code == 0, purged.err
    assert f"removed {len(keys)} key(s) of site" in purged.out
    left = [k for node in cluster.keys_by_node().values() for k in node]
    assert left == ["{crawlfleet}:alerts:state"]
    client.close()


def test_the_dashboard_answers_with_the_crawl_on_the_cluster(
    site: Site, start_worker, cluster: RedisClusterGroup, start_dashboard
) -> None:
    url = crawl(site, start_worker, cluster)
    dash = start_dashboard(url)
    assert dash.get("/health").json()["status"] == "ok"
    view = dash.get("/api/status", headers={"X-API-Key": KEY})
    assert view.status_code == 200, view.text
    (spider,) = view.json()["spiders"]
    assert spider["spider"] == "site" and spider["acked"] == site.pages
    metrics = dash.get("/metrics", headers={"X-API-Key": KEY})
    assert metrics.status_code == 200
    assert 'spider="site"' in metrics.text
    assert dash.get("/", headers={"X-API-Key": KEY}).status_code == 200
    client = cluster.client()
    try:  # the sampler's queue-depth series, in the crawl's slot
        wait_until(lambda: client.llen("{site}:ops:queue") >= 2, "two queue samples")
    finally:
        client.close()
