"""The account pool's Redis data: accounts, credentials, back-off state and counters per site.

Keys per site ``S``:

- ``accounts:S``            hash  username -> Fernet-encrypted password
- ``accounts:S:failures``   hash  username -> consecutive failed logins
- ``accounts:S:parked``     zset  username -> time of the next allowed login attempt
- ``accounts:S:reason``     hash  username -> why the last login failed
- ``credentials:S``         hash  username -> JSON {token, expires_at, refresh_at, obtained_at, th}
- ``credentials:S:expiry``  zset  username -> expires_at (so ``random`` needs no hash scan)
- ``credentials:S:tokens``  hash  sha256(token)[:32] -> username (so ``report`` needs no scan)
- ``accountpool:stats:S``   hash  counters (logins_ok, logins_rejected, …) shared by processes
- ``accountpool:status:S``  hash  when each loop last ran for S, and why it stopped early if so

Every change that touches several keys is one Lua script, so a concurrent reader never sees
a credential in the hash without its expiry entry or the other way round.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from crawlfleet.accountpool.crypto import PasswordBox
from crawlfleet.hub.connect import get_async_redis
from crawlfleet.hub.fleetkeys import pool_tag
from crawlfleet.hub.lua import read_lua

KEYCHECK_KEY = "accountpool:keycheck"
_KEYCHECK_TEXT = "crawlfleet-accountpool"

# Pick uniformly among credentials valid until at least ARGV[1], by rank in the expiry zset:
# ZCOUNT and ZRANGE by rank are O(log N), so the hash is never read as a whole.
_RANDOM = read_lua("crawlfleet.accountpool", "random.lua")

# KEYS[4] = the accounts hash: a login that finishes after its account was deleted stores
# nothing.
_SET_CREDENTIAL = read_lua("crawlfleet.accountpool", "set_credential.lua")

# ARGV[1] = username, or '' to look it up from the token hash ARGV[2]; ARGV[2] = the token hash
# that must still be current ('' = whatever is stored). Returns the username removed, or false.
_REMOVE_CREDENTIAL = read_lua("crawlfleet.accountpool", "remove_credential.lua")

_RECORD_FAILURE = read_lua("crawlfleet.accountpool", "record_failure.lua")


# Connections per process. Requests beyond this wait for a free one (up to the socket timeout)
# rather than failing: redis-py's default pool raises "Too many connections" at 100.
MAX_CONNECTIONS = 64


def connect(url: str) -> Redis:
    """The process's async client for ``url``; raises ``ValueError`` for a malformed URL."""
    return get_async_redis(
        url,
        blocking=True,
        max_connections=MAX_CONNECTIONS,
        timeout=5,
        socket_connect_timeout=3,
        socket_timeout=5,
        # One quick retry: an API answer "Redis unavailable" beats a client timing out.
        retry=Retry(NoBackoff(), 1),
    )


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class CredentialRecord:
    token: str
    expires_at: float
    refresh_at: float
    obtained_at: float

    @classmethod
    def from_json(cls, raw: bytes | str) -> CredentialRecord | None:
        try:
            data = json.loads(raw)
            return cls(
                str(data["token"]),
                float(data["expires_at"]),
                float(data["refresh_at"]),
                float(data["obtained_at"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class AccountView:
    """What the generator needs to decide about one account."""

    username: str
    encrypted_password: bytes
    credential: CredentialRecord | None
    next_try: float | None


@dataclass(frozen=True)
class Counts:
    accounts: int
    credentials: int
    valid: int
    parked: int


class Keys:
    """The keys of one site (the module docstring); ``client``: through a Redis Cluster client
    the site is the hash tag ``{S}`` in each name, so the site's scripts touch one slot."""

    def __init__(self, site: str, client: object = None) -> None:
        site = pool_tag(site, client)
        self.accounts = f"accounts:{site}"
        self.failures = f"accounts:{site}:failures"
        self.parked = f"accounts:{site}:parked"
        self.reason = f"accounts:{site}:reason"
        self.credentials = f"credentials:{site}"
        self.expiry = f"credentials:{site}:expiry"
        self.tokens = f"credentials:{site}:tokens"
        self.stats = f"accountpool:stats:{site}"
        self.status = f"accountpool:status:{site}"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


class AccountStore:
    """Async access to the pool's keys; ``box`` is needed only to add or read passwords."""

    def __init__(self, redis: Redis, box: PasswordBox | None = None) -> None:
        self.redis = redis
        self.box = box
        self._random = redis.register_script(_RANDOM)
        self._set_credential = redis.register_script(_SET_CREDENTIAL)
        self._remove_credential = redis.register_script(_REMOVE_CREDENTIAL)
        self._record_failure = redis.register_script(_RECORD_FAILURE)

    def _box(self) -> PasswordBox:
        if self.box is None:
            raise RuntimeError("this command needs ACCOUNTPOOL_SECRET_KEY to handle passwords")
        return self.box

    async def _hscan(self, key: str, cursor: int, batch: int) -> tuple[int, dict[bytes, bytes]]:
        next_cursor, found = await self.redis.hscan(key, cursor, count=batch)
        return int(next_cursor), cast(dict[bytes, bytes], found)

    async def verify_key(self) -> None:
        """Raise ``DecryptError`` if passwords stored with another key are present."""
        box = self._box()
        stored = await self.redis.get(KEYCHECK_KEY)
        if stored is None:
            await self.redis.set(KEYCHECK_KEY, box.encrypt(_KEYCHECK_TEXT), nx=True)
            return
        box.decrypt(stored if isinstance(stored, bytes) else stored.encode())

    # --- accounts -------------------------------------------------------------------------

    async def add_accounts(self, site: str, accounts: Iterable[tuple[str, str]]) -> tuple[int, int]:
        """Store (username, password) pairs; returns (added, updated). Resets their back-off."""
        box = self._box()
        keys = Keys(site, self.redis)
        added = updated = 0
        batch: dict[str, bytes] = {}

        async def flush() -> None:
            nonlocal added, updated
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(keys.accounts, mapping=batch)  # type: ignore[arg-type]
                pipe.hdel(keys.failures, *batch)
                pipe.zrem(keys.parked, *batch)
                pipe.hdel(keys.reason, *batch)
                new = (await pipe.execute())[0]
            added += int(new)
            updated += len(batch) - int(new)
            batch.clear()

        for username, password in accounts:
            batch[username] = box.encrypt(password)
            if len(batch) >= 500:
                await flush()
        if batch:
            await flush()
        return added, updated

    async def remove_account(self, site: str, username: str) -> bool:
        """Forget an account, its back-off state and its credential; False if it was unknown."""
        keys = Keys(site, self.redis)
        await self.remove_credential(site, username)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.accounts, username)
            pipe.hdel(keys.failures, username)
            pipe.zrem(keys.parked, username)
            pipe.hdel(keys.reason, username)
            removed = (await pipe.execute())[0]
        return bool(removed)

    def decrypt(self, blob: bytes) -> str:
        return self._box().decrypt(blob)

    async def scan_accounts(self, site: str, batch: int = 500) -> AsyncIterator[list[AccountView]]:
        keys = Keys(site, self.redis)
        cursor = 0
        while True:
            cursor, found = await self._hscan(keys.accounts, cursor, batch)
            if found:
                users = [_text(u) for u in found]
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.hmget(keys.credentials, users)
                    pipe.zmscore(keys.parked, users)
                    records, next_tries = await pipe.execute()
                yield [
                    AccountView(
                        user,
                        found[raw_user],
                        CredentialRecord.from_json(rec) if rec is not None else None,
                        next_try,
                    )
                    for (raw_user, user, rec, next_try) in zip(
                        found, users, records, next_tries, strict=True
                    )
                ]
            if cursor == 0:
                return

    async def record_failure(
        self, site: str, username: str, reason: str, base: float, cap: float
    ) -> tuple[int, float]:
        """Count a failed login and park the account; returns (failures, delay in seconds)."""
        keys = Keys(site, self.redis)
        n, delay = await self._record_failure(
            keys=[keys.failures, keys.parked, keys.reason],
            args=[username, reason, time.time(), base, cap],
        )
        return int(n), float(delay)

    async def clear_failures(self, site: str, username: str) -> None:
        keys = Keys(site, self.redis)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.failures, username)
            pipe.zrem(keys.parked, username)
            pipe.hdel(keys.reason, username)
            await pipe.execute()

    async def failures(self, site: str, username: str) -> tuple[int, str | None]:
        keys = Keys(site, self.redis)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.failures, username)
            pipe.hget(keys.reason, username)
            count, reason = await pipe.execute()
        return int(count or 0), _text(reason) if reason is not None else None

    # --- credentials ----------------------------------------------------------------------

    async def set_credential(self, site: str, username: str, record: CredentialRecord) -> bool:
        """Store ``username``'s credential; False (nothing stored) if the account is gone."""
        keys = Keys(site, self.redis)
        th = token_hash(record.token)
        payload = json.dumps(
            {
                "token": record.token,
                "expires_at": record.expires_at,
                "refresh_at": record.refresh_at,
                "obtained_at": record.obtained_at,
                "th": th,
            }
        )
        stored = await self._set_credential(
            keys=[keys.credentials, keys.expiry, keys.tokens, keys.accounts],
            args=[username, payload, record.expires_at, th],
        )
        return bool(stored)

    async def remove_credential(self, site: str, username: str, token: str | None = None) -> bool:
        """Drop ``username``'s credential (only if it is still ``token``, when given)."""
        keys = Keys(site, self.redis)
        removed = await self._remove_credential(
            keys=[keys.credentials, keys.expiry, keys.tokens],
            args=[username, token_hash(token) if token is not None else ""],
        )
        return bool(removed)

    async def report(self, site: str, token: str) -> str | None:
        """Drop the credential holding ``token``; returns its username, or None if unknown."""
        keys = Keys(site, self.redis)
        user = await self._remove_credential(
            keys=[keys.credentials, keys.expiry, keys.tokens], args=["", token_hash(token)]
        )
        return _text(user) if user else None

    async def random_token(self, site: str, valid_until: float) -> str | None:
        keys = Keys(site, self.redis)
        raw = await self._random(
            keys=[keys.expiry, keys.credentials], args=[valid_until, random.random()]
        )
        if raw is None:
            return None
        record = CredentialRecord.from_json(raw)
        return record.token if record is not None else None

    async def credential(self, site: str, username: str) -> CredentialRecord | None:
        raw = await self.redis.hget(Keys(site, self.redis).credentials, username)
        return CredentialRecord.from_json(raw) if raw is not None else None

    async def scan_credentials(
        self, site: str, batch: int = 500
    ) -> AsyncIterator[list[tuple[str, CredentialRecord | None]]]:
        keys = Keys(site, self.redis)
        cursor = 0
        while True:
            cursor, found = await self._hscan(keys.credentials, cursor, batch)
            if found:
                yield [
                    (_text(user), CredentialRecord.from_json(raw)) for user, raw in found.items()
                ]
            if cursor == 0:
                return

    # --- counts and counters --------------------------------------------------------------

    async def counts(self, site: str, valid_until: float) -> Counts:
        keys = Keys(site, self.redis)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hlen(keys.accounts)
            pipe.zcard(keys.expiry)
            pipe.zcount(keys.expiry, valid_until, "+inf")
            pipe.zcount(keys.parked, f"({time.time()}", "+inf")
            accounts, credentials, valid, parked = await pipe.execute()
        return Counts(int(accounts), int(credentials), int(valid), int(parked))

    async def incr_many(self, site: str, amounts: Mapping[str, int]) -> None:
        if not amounts:
            return
        key = Keys(site, self.redis).stats
        async with self.redis.pipeline(transaction=False) as pipe:
            for counter, amount in amounts.items():
                pipe.hincrby(key, counter, amount)
            await pipe.execute()

    async def set_status(self, site: str, loop: str, error: str | None) -> None:
        """Record that ``loop`` ("generate"/"test") just ran for ``site`` (for /health)."""
        await self.redis.hset(
            Keys(site, self.redis).status,
            mapping={f"{loop}_at": time.time(), f"{loop}_error": error or ""},
        )

    async def status(self, site: str) -> dict[str, dict[str, float | str | None]]:
        raw = cast(dict[Any, Any], await self.redis.hgetall(Keys(site, self.redis).status))
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return {
            loop: {
                "last_run": float(fields[f"{loop}_at"]) if f"{loop}_at" in fields else None,
                "error": fields.get(f"{loop}_error") or None,
            }
            for loop in ("generate", "test")
        }

    async def counters(self, site: str) -> dict[str, int]:
        raw = cast(dict[Any, Any], await self.redis.hgetall(Keys(site, self.redis).stats))
        return {_text(k): int(v) for k, v in raw.items()}
