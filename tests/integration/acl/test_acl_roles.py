"""The per-role Redis users of crawlfleet.hub.acl, tested by trying against a real redis-server
started with the rendered aclfile: each role can do its work and nothing beyond it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.crawl import Site, frontier_settings
from support.lifecycle import running
from support.net import free_port
from support.secureredis import PASSWORDS, SecureRedis, start_acl_redis
from support.services import Service

from crawlfleet.accountpool.crypto import PasswordBox, generate_key
from crawlfleet.accountpool.store import AccountStore, CredentialRecord
from crawlfleet.dashboard.sampler import QueueSampler
from crawlfleet.hub.connect import get_async_redis

SPIDER = "site"
# NOPERM outside a script; inside one, Redis says the script's user "can't access" a key;
# Valkey 8 says "No permissions to access a key" in both
REFUSED = "(?i)no permissions|can't access"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRedis]:
    yield from running(start_acl_redis(tmp_path_factory.mktemp("acl"), [SPIDER]))


def client(hub: SecureRedis, role: str) -> redis.Redis:
    return redis.Redis.from_url(hub.url(role))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_default_user_is_off(hub: SecureRedis) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=hub.port).ping()


def test_a_frontier_crawl_works_as_the_crawler_user(
    hub: SecureRedis, site: Site, start_worker
) -> None:
    worker = start_worker(site.url, frontier_settings(hub.url("crawler")))
    assert worker.wait() == 0
    assert site.crawled() == site.expected()
    assert max(site.hits[p] for p in site.expected()) == 1
    assert worker.summary()["reason"] == "finished"
    # it held its liveness subscription (SCHEDULER_LIVENESS) as the crawler user
    assert "SCHEDULER_LIVENESS" not in worker.log.read_text()
    operator = client(hub, "operator")
    declared = [operator.hget(k, "alive_ms") for k in operator.scan_iter(f"{SPIDER}:worker:*")]
    assert declared and all(int(v or 0) > 0 for v in declared)
    # the crawler's own preflight passes (its probe key is allowed, INFO is not and need not be)
    done = cli("check", "--redis-url", hub.url("crawler"))
    assert done.returncode == 0, done.stdout + done.stderr
    # and status works as the dashboard and the operator user
    for role in ("dashboard", "operator"):
        shown = cli("status", SPIDER, "--json", "--redis-url", hub.url(role))
        assert shown.returncode == 0, shown.stderr
        assert f'"{SPIDER}"' in shown.stdout


def test_the_crawler_cannot_touch_the_account_pool(hub: SecureRedis) -> None:
    operator = client(hub, "operator")
    operator.hset("accounts:demosite", "alice", "encrypted")
    crawler = client(hub, "crawler")
    for read in (
        lambda: crawler.hgetall("accounts:demosite"),
        lambda: crawler.hgetall("credentials:demosite"),
        lambda: crawler.eval("return redis.call('HGETALL', KEYS[1])", 1, "accounts:demosite"),
        # a key name built inside the script is checked too
        lambda: crawler.eval("return redis.call('HGETALL', 'accounts:' .. ARGV[1])", 0, "demosite"),
        lambda: crawler.zcard("proxypool:proxies"),
        lambda: crawler.config_get("*"),
        lambda: crawler.flushall(),
        lambda: crawler.keys("*"),
    ):
        with pytest.raises(redis.ResponseError, match=REFUSED):
            read()


def test_the_dashboard_user_cannot_write_anything(hub: SecureRedis) -> None:
    dashboard = client(hub, "dashboard")
    assert dashboard.llen(f"{SPIDER}:requests") >= 0  # it reads
    # the one key it writes: its own queue-depth series, through the sampler's script
    view = {"spider": SPIDER, "queued": 1, "leased": 0, "acked": 2, "items": 3}
    assert QueueSampler(dashboard, 10.0).sample(view)
    assert dashboard.llen(f"{SPIDER}:ops:queue") == 1
    for write in (
        lambda: dashboard.set(f"{SPIDER}:paused", "1"),
        lambda: dashboard.rpush(f"{SPIDER}:requests", "x"),
        lambda: dashboard.delete(f"{SPIDER}:stats"),
        lambda: dashboard.hset(f"{SPIDER}:stats", "x", 1),
        lambda: dashboard.eval("return redis.call('RPUSH', KEYS[1], 'x')", 1, f"{SPIDER}:requests"),
        lambda: dashboard.hset("accounts:demosite", "mallory", "x"),
        lambda: dashboard.hgetall("accounts:demosite"),
        lambda: dashboard.zadd("proxypool:proxies", {"1.2.3.4:80": 100}),
        lambda: dashboard.flushdb(),
    ):
        with pytest.raises(redis.ResponseError, match=REFUSED):
            write()


def test_the_proxy_pool_works_as_its_user(hub: SecureRedis, tmp_path: Path) -> None:
    port = free_port()
    key = "proxypool-api-key-0123456789"
    service = Service(
        "proxypool",
        [
            sys.executable,
            "-m",
            "crawlfleet.cli",
            "proxypool",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--redis-url",
            hub.url("proxypool"),
        ],
        {
            **os.environ,
            "PROXYPOOL_API_KEY": key,
            "PROXYPOOL_PROXIES": "10.1.2.3:8080",
            "PROXYPOOL_TEST_LOOP": "false",
        },
        tmp_path / "proxypool.log",
        f"http://127.0.0.1:{port}/health",
    ).start()
    try:
        import httpx
        from support.waiting import wait_until

        def counted() -> bool:
            answer = httpx.get(f"http://127.0.0.1:{port}/count", headers={"X-API-Key": key})
            return answer.status_code == 200 and int(answer.text) == 1

        wait_until(counted, "the proxy pool to store its proxy", timeout=20)
        health = httpx.get(f"http://127.0.0.1:{port}/health")
        assert health.status_code == 200, health.text
    finally:
        service.stop()
    assert client(hub, "operator").zcard("proxypool:proxies") == 1


def test_the_account_pool_store_works_as_its_user(hub: SecureRedis) -> None:
    async def work() -> None:
        connection = get_async_redis(hub.url("accountpool"))
        store = AccountStore(connection, PasswordBox(generate_key()))
        await store.verify_key()
        assert sum(await store.add_accounts("demosite", [("alice", "secret-1")])) == 1
        now = time.time()
        record = CredentialRecord("tok-1", now + 600, now + 300, now)
        assert await store.set_credential("demosite", "alice", record)
        assert await store.random_token("demosite", now) == "tok-1"
        assert (await store.counts("demosite", now)).accounts == 1
        await store.incr_many("demosite", {"logins_ok": 1})
        await store.set_status("demosite", "tester", None)
        await store.record_failure("demosite", "alice", "rejected", 1.0, 60.0)
        await connection.aclose()

    asyncio.run(work())


def test_a_user_without_rights_gets_one_line_naming_it(hub: SecureRedis) -> None:
    done = cli("check", "--redis-url", hub.url("dashboard"))
    assert done.returncode == 1
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert "user 'dashboard'" in lines[0] and "SET" in lines[0], lines[0]
    assert PASSWORDS["dashboard"] not in done.stdout + done.stderr
    seeded = cli("seed", SPIDER, "http://127.0.0.1/x", "--redis-url", hub.url("dashboard"))
    assert seeded.returncode != 0
    said = seeded.stderr.strip().splitlines()
    assert len(said) == 1 and "permission" in said[0].lower(), seeded.stderr


def test_the_crawler_subscribes_to_its_liveness_channels_only(hub: SecureRedis) -> None:
    crawler = client(hub, "crawler")
    own = crawler.pubsub()
    own.subscribe(f"{SPIDER}:alive:w1")
    assert own.get_message(timeout=5)["type"] == "subscribe"
    counted = crawler.eval(
        "return redis.call('PUBSUB', 'NUMSUB', ARGV[1])", 0, f"{SPIDER}:alive:w1"
    )
    assert counted[1] == 1
    own.close()
    for channel in (f"{SPIDER}:other", "other:alive:w1"):
        other = crawler.pubsub()
        other.subscribe(channel)
        with pytest.raises(redis.exceptions.NoPermissionError):
            other.get_message(timeout=5)
        other.close()
    with pytest.raises(redis.exceptions.NoPermissionError):
        crawler.publish(f"{SPIDER}:alive:w1", "x")


POLITE = {
    "DOWNLOADER_MIDDLEWARES": {"crawlfleet.politeness.middleware.PolitenessMiddleware": 750},
    "POLITENESS_NAMESPACE": "shared",  # a budget shared by several spiders, outside the ACL
}


@pytest.mark.parametrize(
    ("role", "extra", "refused"),
    [
        ("dashboard", {}, "site:requests"),  # reads the crawl, writes none of it
        ("crawler", POLITE, "shared:politeness:index"),  # once: mid-crawl, at the first request
    ],
)
def test_a_user_that_may_not_write_the_crawl_stops_the_worker_at_start_in_one_line(
    hub: SecureRedis, site: Site, start_worker, role: str, extra: dict[str, object], refused: str
) -> None:
    operator = client(hub, "operator")
    before = set(operator.scan_iter("*"))
    worker = start_worker(site.url, frontier_settings(hub.url(role), **extra))
    assert worker.wait() != 0
    log = worker.log.read_text()
    said = [line for line in log.splitlines() if "Frontier cannot start" in line]
    assert len(said) == 1, log[-3000:]
    assert (
        f"Redis user '{role}' (REDIS_URL) may not write {refused}, a key of crawl 'site'"
        in (said[0])
    )
    assert PASSWORDS[role] not in log
    assert not site.crawled()  # nothing fetched
    assert set(operator.scan_iter("*")) == before  # and nothing written
