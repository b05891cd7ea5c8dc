"""The proxy pool and the account pool on a real six-node Redis Cluster (``redis+cluster://``):
``/random``, ``/count``, ``/health`` and ``/report`` answer, every key of the proxy pool sits in
the slot of its tag ``{proxypool:proxies}`` and every key of a site in the slot of ``{<site>}``.
Both run as their services (``crawlfleet proxypool serve``, ``crawlfleet accountpool serve``
logging in to the demo site).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
from redis.crc import key_slot
from support.net import free_port
from support.rediscluster import RedisClusterGroup
from support.services import start_process, stop_process, wait_healthy
from support.waiting import wait_until

from crawlfleet.accountpool.crypto import generate_key
from crawlfleet.proxypool.store import ProxyStore, connect

API_KEY = "cluster-pool-key-0123456789"
HEADERS = {"X-API-Key": API_KEY}


def slots_of(cluster: RedisClusterGroup) -> dict[str, int]:
    return {k: key_slot(k.encode()) for keys in cluster.keys_by_node().values() for k in keys}


def test_the_proxy_pool_serves_from_one_slot(cluster: RedisClusterGroup, tmp_path: Path) -> None:
    url = cluster.url()

    async def fill() -> None:
        client = connect(url)
        store = ProxyStore(client, "proxypool:proxies", 100)
        assert (store.key, store.stats_key) == ("{proxypool:proxies}", "{proxypool:proxies}:stats")
        added = await store.add(["http://127.0.0.2:3128", "http://127.0.0.3:3128"])
        assert added.added == 2
        await store.incr_stats(fetch_added=2)
        await client.aclose()

    asyncio.run(fill())
    port = free_port()
    log = tmp_path / "proxypool.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXYPOOL_")}
    argv = [str(Path(sys.executable).parent / "crawlfleet"), "proxypool", "serve"]
    argv += ["--redis-url", url, "--port", str(port), "--no-fetch", "--no-test"]
    process = start_process(argv, log, env={**env, "PROXYPOOL_API_KEY": API_KEY})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, f"{base}/health", log, timeout=20)
        health = httpx.get(f"{base}/health", timeout=5)
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        count = httpx.get(f"{base}/count", headers=HEADERS, timeout=5)
        assert (count.status_code, count.text.strip()) == (200, "2")
        random = httpx.get(f"{base}/random", headers=HEADERS, timeout=5)
        assert random.status_code == 200 and random.text in ("127.0.0.2:3128", "127.0.0.3:3128")
        report = httpx.post(
            f"{base}/report", headers=HEADERS, json={"proxy": "127.0.0.2:3128"}, timeout=5
        )
        assert report.status_code == 200, report.text
        assert report.json()["score"] < 10  # it entered at 10
        metrics = httpx.get(f"{base}/metrics", timeout=5)
        assert metrics.status_code == 200
    finally:
        stop_process(process)
    client = cluster.client()
    try:
        reported = report.json()  # removed at 0
        score = client.zscore("{proxypool:proxies}", "http://127.0.0.2:3128")
        assert score == (None if reported["removed"] else reported["score"])
        assert client.exists("proxypool:proxies") == 0  # nothing under the untagged name
    finally:
        client.close()
    slots = slots_of(cluster)
    assert set(slots) >= {"{proxypool:proxies}", "{proxypool:proxies}:stats"}, slots
    assert set(slots.values()) == {key_slot(b"{proxypool:proxies}")}, slots


def test_the_account_pool_logs_in_and_serves_a_site_from_one_slot(
    cluster: RedisClusterGroup, tmp_path: Path
) -> None:
    """The whole service: its generator logs in to the demo site, its API serves the tokens."""
    url = cluster.url()
    site_port, port = free_port(), free_port()
    users = tmp_path / "users.txt"
    users.write_text("ann:pw-ann-cluster\nbob:pw-bob-cluster\n")
    site = start_process(
        [sys.executable, "-m", "crawlfleet.cli", "demosite", "--port", str(site_port),
         "--books", "5", "--accounts", f"@{users}", "--log-level", "warning"],
        tmp_path / "demosite.log",
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCOUNTPOOL_")}
    env.update(ACCOUNTPOOL_SECRET_KEY=generate_key(), ACCOUNTPOOL_API_KEY=API_KEY)
    log = tmp_path / "accountpool.log"
    pool = start_process(
        [sys.executable, "-m", "crawlfleet.cli", "accountpool", "serve", "--redis-url", url,
         "--port", str(port), "--site-url", f"demosite=http://127.0.0.1:{site_port}",
         "--generate-interval", "0.5", "--test-interval", "1", "--timeout", "3"],
        log, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def count() -> int:
        answer = httpx.get(f"{base}/demosite/count", headers=HEADERS, timeout=5)
        return int(answer.json()["count"]) if answer.status_code == 200 else -1

    try:
        wait_healthy(site, f"http://127.0.0.1:{site_port}/health", tmp_path / "demosite.log")
        wait_healthy(pool, f"{base}/health", log, timeout=20)
        accounts = [{"username": "ann", "password": "pw-ann-cluster"}]
        accounts.append({"username": "bob", "password": "pw-bob-cluster"})
        added = httpx.post(
            f"{base}/demosite/accounts", headers=HEADERS, json={"accounts": accounts}, timeout=5
        )
        assert added.status_code == 200 and added.json()["added"] == 2, added.text
        wait_until(lambda: count() == 2, "both accounts logged in", timeout=30)
        health = httpx.get(f"{base}/health", timeout=5)
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        token = httpx.get(f"{base}/demosite/random", headers=HEADERS, timeout=5)
        assert token.status_code == 200 and token.text, token.text
        reported = httpx.post(
            f"{base}/demosite/report", headers=HEADERS, json={"token": token.text}, timeout=5
        )
        assert reported.json() == {"site": "demosite", "removed": True}, reported.text
        wait_until(lambda: count() == 2, "a fresh credential after the report", timeout=30)
        assert "Traceback" not in log.read_text()
    finally:
        stop_process(pool)
        stop_process(site)
    slots = slots_of(cluster)
    tagged = {k: s for k, s in slots.items() if "{demosite}" in k}
    assert {"accounts:{demosite}", "credentials:{demosite}:expiry"} <= set(tagged), slots
    assert set(tagged.values()) == {key_slot(b"{demosite}")}, slots
    assert not [k for k in slots if "demosite" in k and k not in tagged], slots
