"""The proxy pool and the account pool on a real six-node Redis Cluster (``redis+cluster://``):
``/random``, ``/count``, ``/health`` and ``/report`` answer, every key of the proxy pool sits in
the slot of its tag ``{proxypool:proxies}`` and every key of a site in the slot of ``{<site>}``.
The proxy pool runs as ``crawlfleet proxypool serve``; the account pool's API in this process
(its Starlette app over httpx's ASGI transport) on the cluster's client.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import httpx
from redis.crc import key_slot
from support.net import free_port
from support.rediscluster import RedisClusterGroup
from support.services import start_process, stop_process, wait_healthy

from crawlfleet.accountpool.api import ApiState, create_app
from crawlfleet.accountpool.crypto import PasswordBox, generate_key
from crawlfleet.accountpool.store import AccountStore, CredentialRecord
from crawlfleet.accountpool.store import connect as account_connect
from crawlfleet.proxypool.store import ProxyStore
from crawlfleet.proxypool.store import connect as proxy_connect

API_KEY = "cluster-pool-key-0123456789"
HEADERS = {"X-API-Key": API_KEY}


def slots_of(cluster: RedisClusterGroup) -> dict[str, int]:
    return {k: key_slot(k.encode()) for keys in cluster.keys_by_node().values() for k in keys}


def test_the_proxy_pool_serves_from_one_slot(cluster: RedisClusterGroup, tmp_path: Path) -> None:
    url = cluster.url()

    async def fill() -> None:
        client = proxy_connect(url)
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


def test_the_account_pool_serves_a_site_from_one_slot(cluster: RedisClusterGroup) -> None:
    url = cluster.url()

    async def main() -> None:
        redis = account_connect(url)
        store = AccountStore(redis, PasswordBox(generate_key()))
        await store.add_accounts("demosite", [("ann", "pw-ann-cluster"), ("bob", "pw-bob-c")])
        now = time.time()
        for user in ("ann", "bob"):
            record = CredentialRecord(f"token-{user}", now + 600, now + 300, now)
            await store.set_credential("demosite", user, record)
        state = ApiState(store, url, ["demosite"], API_KEY, 1.0, asyncio.Event())
        transport = httpx.ASGITransport(app=create_app(state))
        async with httpx.AsyncClient(transport=transport, base_url="http://pool") as client:
            health = await client.get("/health")
            assert health.status_code == 200, health.text
            count = await client.get("/demosite/count", headers=HEADERS)
            assert count.status_code == 200 and count.json()["count"] == 2, count.text
            random = await client.get("/demosite/random", headers=HEADERS)
            assert random.status_code == 200 and random.text in ("token-ann", "token-bob")
            report = await client.post("/demosite/report", headers=HEADERS, content="token-ann")
            assert report.json() == {"site": "demosite", "removed": True}, report.text
            count = await client.get("/demosite/count", headers=HEADERS)
            assert count.json()["count"] == 1, count.text
            metrics = await client.get("/metrics")
            assert metrics.status_code == 200
        await redis.aclose()

    asyncio.run(main())
    slots = slots_of(cluster)
    site = {k: s for k, s in slots.items() if "{demosite}" in k}
    assert {"accounts:{demosite}", "credentials:{demosite}:expiry"} <= set(site), slots
    assert set(site.values()) == {key_slot(b"{demosite}")}, slots
    assert not [k for k in slots if "demosite" in k and k not in site], slots
