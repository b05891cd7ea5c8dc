"""A classic Scrapy project crawls on the frontier: one ADDONS line by hand, zero on the fleet.

The project (classic_project/, ``scrapy startproject`` layout, a ``start_requests()`` spider with
callbacks and items) never imports crawlfleet; the add-on reads REDIS_URL from the environment as a
fleet worker's does. On the fleet the project is run through ``crawlfleet.fleetsettings`` and its
files are not touched at all. Real ``scrapy crawl`` processes, real redis-server, the loopback
link graph.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import redis
from support.crawl import ROOT, Site

PROJECT = Path(__file__).with_name("classic_project")


def _crawl(
    site: Site, redis_url: str, log: Path, project: Path = PROJECT, **extra_env: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "project"), str(project)]),
        **extra_env,
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
                # the add-on paces every site (default 1 request/s); the loopback site takes more
                "-s",
                "POLITENESS_RATE=200",
            ],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _check_two_worker_crawl(
    site: Site, redis_url: str, workers: list[subprocess.Popen[bytes]], logs: list[Path]
) -> str:
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
    # the add-on turns politeness on, so the queue is kept by site
    queue = client.hget("pages:frontier", "queue_class")
    assert queue == b"crawlfleet.frontier.queues.KeyedPriorityQueue"
    return text


def test_classic_project_crawls_every_page_once_with_two_workers(
    site: Site, redis_url: str, tmp_path: Path
) -> None:
    site.pages = 120
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    workers = [_crawl(site, redis_url, log) for log in logs]
    _check_two_worker_crawl(site, redis_url, workers, logs)


def test_on_the_fleet_the_project_needs_no_line_and_the_environment_wins(
    site: Site, redis_url: str, tmp_path: Path
) -> None:
    """Zero lines: no ADDONS, and a developer's REDIS_URL that the fleet's environment overrides."""
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    settings = project / "classic" / "settings.py"
    text = settings.read_text().replace('ADDONS = {"crawlfleet.addon.Fleet": 0}\n', "")
    assert "ADDONS = " not in text and "crawlfleet" not in text
    settings.write_text(text + 'REDIS_URL = "redis://127.0.0.1:1/0"  # a developer\'s laptop\n')
    site.pages = 80
    logs = [tmp_path / f"fleet{i}.log" for i in range(2)]
    workers = [
        _crawl(
            site,
            redis_url,
            log,
            project,
            SCRAPY_SETTINGS_MODULE="crawlfleet.fleetsettings",
            CRAWLFLEET_PROJECT_SETTINGS="classic.settings",
        )
        for log in logs
    ]
    _check_two_worker_crawl(site, redis_url, workers, logs)


def test_on_the_fleet_a_settings_module_that_does_not_import_is_one_line(
    redis_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "project"),
        "SCRAPY_SETTINGS_MODULE": "crawlfleet.fleetsettings",
        "CRAWLFLEET_PROJECT_SETTINGS": "nosuchproject.settings",
    }
    done = subprocess.run(
        [sys.executable, "-m", "scrapy", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert (
        "CRAWLFLEET_PROJECT_SETTINGS='nosuchproject.settings' does not import: "
        "ModuleNotFoundError: No module named 'nosuchproject'" in done.stderr
    )
