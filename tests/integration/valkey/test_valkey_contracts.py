"""The hub's contracts on valkey-server (Valkey 8, Debian 12's bookworm-backports): the frontier's
Lua under a two-worker crawl with a SIGKILL, the Bloom filter, both pools' APIs, the dashboard's
/metrics and `crawlfleet status`. The rest of the suite runs on Valkey with
CRAWLFLEET_TEST_SERVER=valkey (docs/testing.md); this module runs on it in every `make test`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from support.backends import assert_redis_drained
from support.crawl import ROOT, Site, Worker, frontier_settings
from support.net import free_port
from support.services import start_process, stop_process, wait_healthy
from support.waiting import wait_until

from crawlfleet.accountpool.api import ApiState, create_app
from crawlfleet.accountpool.crypto import PasswordBox, generate_key
from crawlfleet.accountpool.store import AccountStore, CredentialRecord, connect
from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import expected_error_rate

API_KEY = "valkey-test-key-0123456789"
KEY = {"X-API-Key": API_KEY}
BLOOM = "crawlfleet.frontier.dupefilter.BloomDupeFilter"
WORKERSTATS = "crawlfleet.extensions.workerstats.WorkerStats"


def service_env(**extra: str) -> dict[str, str]:
    """This environment without a REDIS_URL (flags give it), the project importable."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return {**env, "PYTHONPATH": str(ROOT / "project"), **extra}


def crawlfleet(*args: str) -> subprocess.CompletedProcess[str]:
    """``crawlfleet ARGS…`` as an operator runs it."""
    argv = [sys.executable, "-m", "crawlfleet.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=service_env(), timeout=60)


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``crawlfleet COMMAND … --port P`` with API key environment ``env``; its URL once healthy."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str]) -> str:
        port = free_port()
        log = tmp_path / f"service{len(started)}.log"
        argv = [sys.executable, "-m", "crawlfleet.cli", *args, "--port", str(port)]
        proc = start_process(argv, log, env=service_env(**env))
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, f"{url}/health", log, accept=lambda r: r.status_code == 200)
        return url

    yield start
    for proc in started:
        stop_process(proc, 15)


def get(url: str, **kwargs: object) -> httpx.Response:
    return httpx.get(url, timeout=10, trust_env=False, **kwargs)  # type: ignore[arg-type]


def leases_of(client: redis.Redis, worker: Worker, spider: str = "site") -> int:
    """How many requests ``worker`` (found by its pid) holds leased now."""
    for member in client.zrange(f"{spider}:workers", 0, -1):
        worker_id = bytes(member).decode()
        info = json.loads(client.hget(f"{spider}:worker:{worker_id}", "info") or "{}")
        if info.get("pid") == worker.proc.pid:
            return int(client.hlen(f"{spider}:leases:{worker_id}"))
    raise AssertionError(f"worker pid {worker.proc.pid} is not registered")


def test_the_server_is_valkey_8(redis_client: redis.Redis) -> None:
    server = redis_client.info("server")
    assert server["server_name"] == "valkey", server
    assert str(server["valkey_version"]).startswith("8."), server
    assert redis_client.execute_command("MODULE", "LIST") == []  # no native Bloom filter


def test_two_workers_and_a_sigkill_crawl_every_page(
    site: Site, redis_url: str, start_worker: Callable[..., Worker]
) -> None:
    """At-least-once on Valkey: every page crawled; only what the victim held leased is
    crawled twice, and no page more than twice. The Bloom dupefilter runs its Lua too."""
    site.pages, site.delay = 60, 0.2
    settings = frontier_settings(
        redis_url,
        DUPEFILTER_CLASS=BLOOM,
        BLOOMFILTER_CAPACITY=10_000,
        SCHEDULER_QUEUE_CLASS="crawlfleet.frontier.queues.PriorityQueue",
        SCHEDULER_ENQUEUE_BATCH=True,
        CONCURRENT_REQUESTS=2,
    )
    victim = start_worker(site.url, settings, "victim")
    survivor = start_worker(site.url, settings, "survivor")
    wait_until(
        lambda: len(victim.parsed()) >= 3 and len(survivor.parsed()) >= 3,
        what="both workers to crawl",
    )
    client = redis.Redis.from_url(redis_url)
    victim.proc.send_signal(signal.SIGSTOP)  # frozen: what it holds now is what it loses
    held = leases_of(client, victim)
    victim.proc.send_signal(signal.SIGKILL)
    victim.wait()
    assert survivor.wait() == 0, survivor.log.read_text()[-3000:]
    assert survivor.summary()["reason"] == "finished"
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) <= 2, site.hits
    assert sum(site.hits[p] - 1 for p in site.expected()) <= held, (held, site.hits)
    assert len(set(survivor.parsed())) == len(survivor.parsed())
    assert set(victim.parsed()) | set(survivor.parsed()) == site.expected()
    assert int(client.hget("site:stats", "scheduler/requeued") or 0) > 0
    assert_redis_drained(client)
    assert client.exists("site:bloomfilter") == 1


def test_bloom_filter_add_check_and_error_rate(redis_client: redis.Redis) -> None:
    bf = BloomFilter(redis_client, "s:bloomfilter", capacity=20_000, error_rate=0.01)
    data = random.Random(7).randbytes(20 * 40_000)
    fps = [data[i : i + 20] for i in range(0, len(data), 20)]
    added, probes = fps[:20_000], fps[20_000:]
    assert bf.add(added[0]) is True
    assert added[0] in bf
    assert bf.add(added[0]) is False
    assert bf.add_many([added[1], added[0], added[1]]) == [True, False, False]
    bf.add_many(added)
    assert all(bf.contains_many(added))  # no false negative
    theory = expected_error_rate(bf.bits, bf.hashes, len(added))
    measured = sum(bf.contains_many(probes)) / len(probes)
    # 20,000 probes at ~1 %: about 200 expected false positives; +-40 % is over 5 sigma.
    assert measured == pytest.approx(theory, rel=0.4)
    info = bf.info()
    assert info["count_estimate"] == pytest.approx(len(added), rel=0.02)


def test_proxy_pool_round_trip(
    redis_url: str, redis_client: redis.Redis, start_service: Callable[..., str]
) -> None:
    url = start_service(
        "proxypool", "serve", "--redis-url", redis_url, "--redis-key", "vk:proxies",
        "--no-fetch", "--no-test", env={"PROXYPOOL_API_KEY": API_KEY},
    )  # fmt: skip
    redis_client.zadd("vk:proxies", {"http://10.0.0.1:8080": 100, "http://10.0.0.2:3128": 40})
    assert get(f"{url}/random").status_code == 401
    random_proxy = get(f"{url}/random", headers=KEY)
    assert random_proxy.status_code == 200 and random_proxy.text == "10.0.0.1:8080"
    assert get(f"{url}/count", headers=KEY).text.strip() == "2"
    everything = get(f"{url}/all", params={"format": "json"}, headers=KEY).json()
    assert everything == [
        {"proxy": "http://10.0.0.1:8080", "score": 100},
        {"proxy": "http://10.0.0.2:3128", "score": 40},
    ]
    report = httpx.post(
        f"{url}/report", json={"proxy": "10.0.0.1:8080"}, headers=KEY, trust_env=False
    )
    assert report.status_code == 200, report.text
    assert report.json()["proxy"] == "10.0.0.1:8080" and report.json()["score"] < 100
    assert redis_client.zscore("vk:proxies", "http://10.0.0.1:8080") == report.json()["score"]
    health = get(f"{url}/health").json()
    assert health["status"] == "ok" and health["pool_size"] == 2
    assert "proxypool_redis_up 1.0" in get(f"{url}/metrics").text


def test_account_pool_round_trip(redis_url: str) -> None:
    async def main() -> None:
        client = connect(redis_url)
        store = AccountStore(client, PasswordBox(generate_key()))
        state = ApiState(store, redis_url, ["demosite"], API_KEY, 1.0, asyncio.Event())
        transport = httpx.ASGITransport(app=create_app(state))
        async with httpx.AsyncClient(transport=transport, base_url="http://pool") as api:
            accounts = [{"username": "alice", "password": "pw-alice-0123"}]
            added = await api.post("/demosite/accounts", json={"accounts": accounts}, headers=KEY)
            assert added.json() == {"site": "demosite", "added": 1, "updated": 0, "skipped": []}
            assert (await api.get("/demosite/random", headers=KEY)).status_code == 503
            now = time.time()
            stored = CredentialRecord("token-alice", now + 600, now + 300, now)
            assert await store.set_credential("demosite", "alice", stored)
            token = await api.get("/demosite/random", headers=KEY)
            assert token.status_code == 200 and token.text == "token-alice"
            count = (await api.get("/demosite/count", headers=KEY)).json()
            assert count["count"] == 1 and count["accounts"] == 1
            report = await api.post("/demosite/report", json={"token": "token-alice"}, headers=KEY)
            assert report.json()["removed"] is True
            assert (await api.get("/demosite/count", headers=KEY)).json()["count"] == 0
            assert "accountpool_redis_up 1" in (await api.get("/metrics")).text
        await client.aclose()

    asyncio.run(main())


def test_status_and_dashboard_metrics_follow_a_two_worker_crawl(
    site: Site,
    redis_url: str,
    start_worker: Callable[..., Worker],
    start_service: Callable[..., str],
) -> None:
    """Without a kill, every page is crawled exactly once; status and /metrics see both workers."""
    site.pages, site.delay = 160, 0.25  # about 10 s: longer than the checks made during it
    dashboard = start_service(
        "dashboard", "--redis-url", redis_url, "--sample-interval", "0.5", "--refresh", "0.5",
        env={"DASHBOARD_API_KEY": API_KEY},
    )  # fmt: skip
    settings = frontier_settings(
        redis_url, EXTENSIONS={WORKERSTATS: 500}, WORKERSTATS_INTERVAL=0.3, CONCURRENT_REQUESTS=2
    )
    workers = [start_worker(site.url, settings, name) for name in ("one", "two")]

    def status() -> dict[str, object]:
        done = crawlfleet("status", "site", "--json", "--redis-url", redis_url)
        assert done.returncode == 0, done.stderr
        (spider,) = json.loads(done.stdout)["spiders"]
        return dict(spider)

    def both_alive() -> bool:
        # until the first worker registers, the crawl does not exist yet: status says so
        done = crawlfleet("status", "site", "--json", "--redis-url", redis_url)
        return done.returncode == 0 and json.loads(done.stdout)["spiders"][0]["workers_alive"] == 2

    wait_until(both_alive, timeout=60, what="two alive workers")

    def worker_up_lines() -> list[str]:
        text = get(f"{dashboard}/metrics", headers=KEY).text
        return [line for line in text.splitlines() if line.startswith("crawlfleet_worker_up{")]

    wait_until(lambda: len(worker_up_lines()) == 2, timeout=30, what="two workers in /metrics")
    metrics = get(f"{dashboard}/metrics", headers=KEY).text
    assert "crawlfleet_redis_up 1.0" in metrics
    assert 'crawlfleet_queued{spider="site"}' in metrics
    assert get(f"{dashboard}/metrics").status_code == 401

    for worker in workers:
        assert worker.wait() == 0, worker.log.read_text()[-3000:]
    assert site.crawled() == site.expected()
    assert all(site.hits[p] == 1 for p in site.expected()), site.hits
    final = status()
    assert final["workers_alive"] == 0
    assert final["acked"] == site.pages and final["queued"] == 0 and final["leased"] == 0
