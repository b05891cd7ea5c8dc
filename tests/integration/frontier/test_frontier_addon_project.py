"""A classic Scrapy project crawls on the frontier with one ADDONS line, two workers together.

The project (classic_project/, ``scrapy startproject`` layout, a ``start_requests()`` spider with
callbacks and items) never imports crawlfleet; the add-on reads REDIS_URL from the environment as a
fleet worker's does. Real ``scrapy crawl`` processes, real redis-server, the loopback link graph.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import redis
from frontier_support import ROOT, Site

PROJECT = Path(__file__).with_name("classic_project")


def _crawl(site: Site, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "project"), str(PROJECT)]),
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scrapy",
                "crawl",
                "pages",
                "-a",
                f"site={site.url}",
                "-a",
                f"pages={site.pages}",
                "-s",
                "SCHEDULER_LEASE_TIMEOUT=3",
                "-s",
                "SCHEDULER_HEARTBEAT_INTERVAL=0.5",
                "-s",
                "BLOOMFILTER_CAPACITY=100000",
            ],
            cwd=PROJECT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_classic_project_crawls_every_page_once_with_two_workers(
    site: Site, redis_url: str, tmp_path: Path
) -> None:
    site.pages = 120
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    workers = [_crawl(site, redis_url, log) for log in logs]
    for worker, log in zip(workers, logs, strict=True):
        try:
            code = worker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise AssertionError(log.read_text()[-3000:]) from None
        assert code == 0, log.read_text()[-3000:]
    text = "".join(log.read_text() for log in logs)
    assert "Enabled addons:\n[<crawlfleet.addon.Fleet" in text
    assert text.count("runs start_requests() as its start") == 2
    assert site.crawled() == site.expected()
    assert all(site.hits[p] == 1 for p in site.expected()), site.hits
    client = redis.Redis.from_url(redis_url)
    stored = [
        json.loads(raw)["path"]
        for _, fields in client.xrange("pages:items")
        for key, raw in fields.items()
        if key == b"item"
    ]
    assert sorted(stored) == sorted(site.expected())
    assert client.zcard("pages:workers") == 0
    assert client.exists("pages:requests") == 0
