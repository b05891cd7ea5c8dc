"""The Redis store against a real redis-server: encryption at rest, random by rank, reports,
back-off, key checks — and ``random`` never reading a whole hash."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import redis
from redis.asyncio import Redis

from crawlfleet.accountpool.crypto import DecryptError, PasswordBox, generate_key
from crawlfleet.accountpool.store import AccountStore, CredentialRecord, Keys


def record(token: str, lifetime: float) -> CredentialRecord:
    now = time.time()
    return CredentialRecord(token, now + lifetime, now + lifetime / 2, now)


def run(redis_url: str, key: str, body: Callable[[AccountStore], object]) -> None:
    async def main() -> None:
        client = Redis.from_url(redis_url)
        try:
            await body(AccountStore(client, PasswordBox(key)))  # type: ignore[misc]
        finally:
            await client.aclose()

    asyncio.run(main())


def test_passwords_encrypted_at_rest_and_readded_accounts_reset(
    redis_url: str, redis_client: redis.Redis, secret_key: str, password: Callable[[str], str]
) -> None:
    pw_a, pw_b = password("a"), password("b")

    async def body(store: AccountStore) -> None:
        assert await store.add_accounts("s", [("a", pw_a), ("b", pw_b)]) == (2, 0)
        await store.record_failure("s", "a", "rejected", 10, 100)
        assert (await store.failures("s", "a"))[0] == 1
        assert await store.add_accounts("s", [("a", pw_a)]) == (0, 1)
        assert await store.failures("s", "a") == (0, None)
        raw = redis_client.hget("accounts:s", "a")
        assert raw is not None and pw_a.encode() not in raw
        assert store.decrypt(raw) == pw_a

    run(redis_url, secret_key, body)
    dump = b"".join(redis_client.dump(k) or b"" for k in redis_client.keys("*"))
    assert pw_a.encode() not in dump and pw_b.encode() not in dump


def test_random_serves_only_valid_tokens_uniformly(redis_url: str, secret_key: str) -> None:
    async def body(store: AccountStore) -> None:
        assert await store.random_token("s", time.time()) is None
        await store.add_accounts("s", [(u, "pw-r") for u in ("old", "dead", "u1", "u2", "u3")])
        await store.set_credential("s", "old", record("t-old", 5))
        await store.set_credential("s", "dead", record("t-dead", -5))
        assert await store.random_token("s", time.time() + 10) is None
        for user in ("u1", "u2", "u3"):
            await store.set_credential("s", user, record(f"t-{user}", 600))
        seen = {await store.random_token("s", time.time() + 10) for _ in range(200)}
        assert seen == {"t-u1", "t-u2", "t-u3"}
        counts = await store.counts("s", time.time() + 10)
        assert (counts.credentials, counts.valid) == (5, 3)

    run(redis_url, secret_key, body)


def test_random_never_reads_a_whole_hash(
    redis_url: str, redis_client: redis.Redis, secret_key: str
) -> None:
    async def body(store: AccountStore) -> None:
        await store.add_accounts("s", [(f"u{i}", "pw-w") for i in range(300)])
        for i in range(300):
            await store.set_credential("s", f"u{i}", record(f"t{i}", 600))
        redis_client.config_resetstat()
        for _ in range(50):
            assert await store.random_token("s", time.time())

    run(redis_url, secret_key, body)
    stats = redis_client.info("commandstats")
    # O(log N) commands only (ZRANGE is by rank, one element): no HGETALL/HKEYS/HVALS/scans.
    data_commands = {n for n in stats if not n.startswith(("cmdstat_config", "cmdstat_script"))}
    assert data_commands == {
        "cmdstat_evalsha",
        "cmdstat_zcard",
        "cmdstat_zcount",
        "cmdstat_zrange",
        "cmdstat_hget",
    }
    assert all(stats[n]["calls"] == 50 for n in data_commands - {"cmdstat_evalsha"})


def test_report_and_stale_removal(redis_url: str, secret_key: str) -> None:
    async def body(store: AccountStore) -> None:
        await store.add_accounts("s", [("u", "pw-u")])
        await store.set_credential("s", "u", record("t1", 600))
        # A fresh token replaces t1: t1's reverse entry goes, reporting it removes nothing.
        await store.set_credential("s", "u", record("t2", 600))
        assert await store.report("s", "t1") is None
        assert not await store.remove_credential("s", "u", "t1")
        assert (await store.credential("s", "u")).token == "t2"  # type: ignore[union-attr]
        assert await store.report("s", "t2") == "u"
        assert await store.report("s", "t2") is None
        assert await store.credential("s", "u") is None
        assert await store.random_token("s", 0) is None

    run(redis_url, secret_key, body)


def test_removal_leaves_no_index_behind(
    redis_url: str, redis_client: redis.Redis, secret_key: str
) -> None:
    async def body(store: AccountStore) -> None:
        await store.add_accounts("s", [("u", "pw-u")])
        assert await store.set_credential("s", "u", record("t1", 600))
        assert await store.remove_credential("s", "u")
        # A login that finishes after its account was deleted stores nothing.
        assert await store.remove_account("s", "u")
        assert not await store.set_credential("s", "u", record("t2", 600))
        assert not await store.remove_account("s", "u")

    run(redis_url, secret_key, body)
    keys = Keys("s")
    assert not redis_client.exists(
        keys.credentials, keys.expiry, keys.tokens, keys.accounts, keys.parked
    )


def test_backoff_doubles_up_to_cap_and_parks(redis_url: str, secret_key: str) -> None:
    async def body(store: AccountStore) -> None:
        delays = [(await store.record_failure("s", "u", "rejected", 2, 10))[1] for _ in range(5)]
        assert delays == [2, 4, 8, 10, 10]
        assert await store.failures("s", "u") == (5, "rejected")
        assert (await store.counts("s", 0)).parked == 1
        await store.clear_failures("s", "u")
        assert (await store.counts("s", 0)).parked == 0

    run(redis_url, secret_key, body)


def test_key_check_refuses_another_key(redis_url: str, secret_key: str) -> None:
    async def first(store: AccountStore) -> None:
        await store.verify_key()
        await store.verify_key()

    async def other(store: AccountStore) -> None:
        with pytest.raises(DecryptError):
            await store.verify_key()

    run(redis_url, secret_key, first)
    run(redis_url, generate_key(), other)
    run(redis_url, f"{generate_key()},{secret_key}", first)  # rotation: old key still listed


def test_corrupt_credential_record_is_ignored_by_random(
    redis_url: str, redis_client: redis.Redis, secret_key: str
) -> None:
    redis_client.hset("credentials:s", "u", "{not json")
    redis_client.zadd("credentials:s:expiry", {"u": time.time() + 600})

    async def body(store: AccountStore) -> None:
        assert await store.random_token("s", time.time()) is None

    run(redis_url, secret_key, body)
