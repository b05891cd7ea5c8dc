"""The HTTP API on real Redis (the Starlette app driven in-process through httpx's ASGI
transport): keys, site routing, bodies good and bad, empty pool, metrics, Redis down."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from crawlfleet.accountpool.api import MAX_BODY_BYTES, ApiState, create_app
from crawlfleet.accountpool.crypto import PasswordBox
from crawlfleet.accountpool.store import MAX_CONNECTIONS, AccountStore, CredentialRecord, connect

KEY = "api-test-key-0123456789"
Body = Callable[[httpx.AsyncClient, AccountStore, ApiState], Awaitable[None]]


def run(redis_url: str, secret_key: str, body: Body, api_key: str | None = KEY) -> None:
    async def main() -> None:
        redis = connect(redis_url)
        store = AccountStore(redis, PasswordBox(secret_key))
        state = ApiState(store, redis_url, ["demosite", "shop"], api_key, 1.0, asyncio.Event())
        transport = httpx.ASGITransport(app=create_app(state))
        async with httpx.AsyncClient(transport=transport, base_url="http://pool") as client:
            await body(client, store, state)
        await redis.aclose()

    asyncio.run(main())


def auth(key: str = KEY) -> dict[str, str]:
    return {"X-API-Key": key}


async def add_credential(store: AccountStore, user: str, token: str, lifetime: float) -> None:
    await store.add_accounts("demosite", [(user, f"pw-{user}-api")])
    now = time.time()
    await store.set_credential(
        "demosite", user, CredentialRecord(token, now + lifetime, now + lifetime / 2, now)
    )


def test_api_key_required_everywhere_but_health_and_metrics(
    redis_url: str, secret_key: str
) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        calls = [
            ("GET", "/demosite/random"),
            ("GET", "/demosite/count"),
            ("POST", "/demosite/accounts"),
            ("POST", "/demosite/report"),
            ("GET", "/nosuchsite/random"),  # no site list for a caller without the key
        ]
        for method, path in calls:
            for headers, error in (
                ({}, "missing X-API-Key header"),
                (auth(""), "missing X-API-Key header"),
                (auth("wrong-key-0123456789"), "invalid API key"),
                (auth(KEY + "x"), "invalid API key"),
            ):
                response = await client.request(method, path, headers=headers)
                assert response.status_code == 401, (method, path, headers)
                assert response.json() == {"error": error}
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/demosite/count", headers=auth())).status_code == 200

    run(redis_url, secret_key, body)


def test_unknown_site_lists_known_sites(redis_url: str, secret_key: str) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        for method, path in (
            ("GET", "/nope/random"),
            ("GET", "/nope/count"),
            ("POST", "/nope/accounts"),
            ("POST", "/nope/report"),
        ):
            response = await client.request(method, path, headers=auth(), json={})
            assert response.status_code == 404
            assert response.json() == {
                "error": "unknown site 'nope'",
                "known_sites": ["demosite", "shop"],
            }
        assert (await client.get("/demosite/unknown", headers=auth())).status_code == 404
        assert (await client.get("/demosite/report", headers=auth())).status_code == 405
        assert (await client.delete("/demosite/random", headers=auth())).status_code == 405

    run(redis_url, secret_key, body)


def test_random_and_count(redis_url: str, secret_key: str) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        await store.add_accounts("demosite", [("a", "pw-a-1"), ("b", "pw-b-1")])
        empty = await client.get("/demosite/random", headers=auth())
        assert empty.status_code == 503
        assert "no valid credential for site 'demosite' yet (2 accounts" in empty.json()["error"]
        await add_credential(store, "a", "tok-a", 600)
        await add_credential(store, "b", "tok-b", 0.5)  # inside min_ttl (1 s): never served
        for _ in range(20):
            response = await client.get("/demosite/random", headers=auth())
            assert response.status_code == 200
            assert response.text == "tok-a"
            assert response.headers["content-type"].startswith("text/plain")
        count = (await client.get("/demosite/count", headers=auth())).json()
        assert count == {
            "site": "demosite",
            "count": 1,
            "accounts": 2,
            "credentials": 2,
            "parked": 0,
        }

    run(redis_url, secret_key, body)


def test_more_concurrent_requests_than_redis_connections(redis_url: str, secret_key: str) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        await add_credential(store, "a", "tok-a", 600)
        responses = await asyncio.gather(
            *(client.get("/demosite/random", headers=auth()) for _ in range(3 * MAX_CONNECTIONS))
        )
        assert {r.status_code for r in responses} == {200}

    run(redis_url, secret_key, body)


def test_add_accounts(redis_url: str, secret_key: str, password: Callable[[str], str]) -> None:
    pw1, pw2 = password("api1"), password("api2")

    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        accounts = [
            {"username": "u1", "password": pw1},
            {"username": "u2", "password": pw2},
            {"username": "u3"},
            {"username": "", "password": pw1},
        ]
        response = await client.post(
            "/demosite/accounts", json={"accounts": accounts}, headers=auth()
        )
        assert response.status_code == 200
        result = response.json()
        assert (result["added"], result["updated"]) == (2, 0)
        assert [s["index"] for s in result["skipped"]] == [2, 3]
        assert pw1 not in response.text
        assert state.wake is not None and state.wake.is_set()
        again = await client.post("/demosite/accounts", json=accounts[:1], headers=auth())
        assert (again.json()["added"], again.json()["updated"]) == (0, 1)
        assert (await store.counts("demosite", 0)).accounts == 2

        bad_bodies: list[tuple[bytes, int, str]] = [
            (b"not json", 400, "JSON"),
            (b'{"accounts": 5}', 400, "accounts"),
            (b'[{"username": "x"}]', 400, ""),
            (b"[" + b"1," * (MAX_BODY_BYTES // 2) + b"1]", 413, "larger"),
        ]
        for raw, status, fragment in bad_bodies:
            response = await client.post("/demosite/accounts", content=raw, headers=auth())
            assert response.status_code == status
            assert fragment in response.text
        assert (await store.counts("demosite", 0)).accounts == 2

    run(redis_url, secret_key, body)


def test_delete_account(redis_url: str, secret_key: str) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        await store.add_accounts("demosite", [("a", "pw-del-a"), ("b", "pw-del-b")])
        await add_credential(store, "a", "tok-a", 600)
        await store.record_failure("demosite", "a", "rejected", 60, 60)
        assert (await store.counts("demosite", 0)).parked == 1
        assert (await client.delete("/demosite/accounts/a")).status_code == 401
        response = await client.delete("/demosite/accounts/a", headers=auth())
        assert response.json() == {"site": "demosite", "removed": "a"}
        counts = await store.counts("demosite", 0)
        assert (counts.accounts, counts.credentials, counts.parked) == (1, 0, 0)
        assert await store.failures("demosite", "a") == (0, None)
        assert await store.report("demosite", "tok-a") is None
        missing = await client.delete("/demosite/accounts/a", headers=auth())
        assert missing.status_code == 404 and "no account 'a'" in missing.json()["error"]
        assert (await client.delete("/nope/accounts/b", headers=auth())).status_code == 404

    run(redis_url, secret_key, body)


def test_adding_accounts_needs_a_configured_key(redis_url: str, secret_key: str) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        response = await client.post(
            "/demosite/accounts", json=[{"username": "u", "password": "pw-open-1"}]
        )
        assert response.status_code == 403
        assert "ACCOUNTPOOL_API_KEY" in response.json()["error"]
        assert (await client.delete("/demosite/accounts/u")).status_code == 403
        assert (await client.get("/demosite/count")).status_code == 200  # the rest is open

    run(redis_url, secret_key, body, api_key=None)


def test_report(redis_url: str, secret_key: str) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        await add_credential(store, "a", "tok-a", 600)
        await add_credential(store, "b", "tok-b", 600)
        assert state.wake is not None
        response = await client.post("/demosite/report", json={"token": "tok-a"}, headers=auth())
        assert response.json() == {"site": "demosite", "removed": True}
        assert state.wake.is_set()
        state.wake.clear()
        # Plain-text body works too; reporting twice is harmless.
        again = await client.post("/demosite/report", content=b"tok-a\n", headers=auth())
        assert again.json()["removed"] is False
        assert not state.wake.is_set()
        text = await client.post("/demosite/report", content=b"tok-b", headers=auth())
        assert text.json()["removed"] is True
        for raw in (b"", b"   ", b'{"token": 5}', b"[1]", b"{bad"):
            bad = await client.post(
                "/demosite/report",
                content=raw,
                headers={**auth(), "Content-Type": "application/json"},
            )
            assert bad.status_code == 400, raw
        assert (await store.counters("demosite"))["reports"] == 2

    run(redis_url, secret_key, body)


def test_health_and_metrics(redis_url: str, secret_key: str) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        await store.add_accounts("demosite", [("a", "pw-m-1")])
        await add_credential(store, "a", "tok-a", 600)
        await store.incr_many("demosite", {"logins_ok": 3, "logins_rejected": 2})
        health = (await client.get("/health")).json()
        assert health["status"] == "ok"
        assert health["sites"]["demosite"] == {
            "accounts": 1,
            "valid": 1,
            "generate": {"last_run": None, "error": None},
            "test": {"last_run": None, "error": None},
        }
        await store.set_status("demosite", "test", "check answered HTTP 403")
        site_health = (await client.get("/health")).json()["sites"]["demosite"]
        assert site_health["test"]["error"] == "check answered HTTP 403"
        assert site_health["test"]["last_run"] > time.time() - 60
        await client.get("/demosite/random", headers=auth())
        text = (await client.get("/metrics")).text
        for line in (
            "accountpool_redis_up 1.0",
            'accountpool_accounts{site="demosite"} 1.0',
            'accountpool_credentials_valid{site="demosite"} 1.0',
            'accountpool_logins_total{result="ok",site="demosite"} 3.0',
            'accountpool_logins_total{result="rejected",site="demosite"} 2.0',
            'accountpool_api_requests_total{endpoint="random",status="200"} 1.0',
        ):
            assert line in text.splitlines(), line

    run(redis_url, secret_key, body)


def test_redis_down_gives_503_naming_the_cause_then_recovers(
    own_redis: Any, secret_key: str
) -> None:
    async def body(client: httpx.AsyncClient, store: AccountStore, state: ApiState) -> None:
        await add_credential(store, "a", "tok-a", 600)
        assert (await client.get("/demosite/random", headers=auth())).text == "tok-a"
        own_redis.stop()
        for method, path in (
            ("GET", "/demosite/random"),
            ("GET", "/demosite/count"),
            ("POST", "/demosite/report"),
            ("GET", "/health"),
        ):
            response = await client.request(method, path, headers=auth(), content=b"tok-a")
            assert response.status_code == 503, path
            error = response.json()["error"]
            assert f"Redis unavailable at redis://127.0.0.1:{own_redis.port}/0" in error
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert "accountpool_redis_up 0.0" in metrics.text
        own_redis.start()
        response = await client.get("/demosite/random", headers=auth())
        assert (response.status_code, response.text) == (200, "tok-a")
        assert (await client.get("/health")).json()["status"] == "ok"

    run(own_redis.url, secret_key, body)
