"""One Redis connection pool per process, built from a URL; errors never leak passwords."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

_clients: dict[tuple[str, tuple[tuple[str, Any], ...]], redis.Redis] = {}
_lock = threading.Lock()


class RedisConfigError(ValueError):
    """A Redis URL or parameter that cannot work; the message names it with the password masked."""


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (for logs and error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    # The host and port as written: parts.port raises on a non-numeric port.
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def get_redis(url: str, **params: Any) -> redis.Redis:
    """Return the process-wide client for ``url`` (one connection pool per URL and parameters)."""
    if not url or urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise RedisConfigError(
            f"REDIS_URL must look like redis://[:password@]host:port/db, got {mask_url(url)!r}"
        )
    key = (url, tuple(sorted(params.items())))
    with _lock:
        client = _clients.get(key)
        if client is None:
            try:
                client = redis.Redis.from_url(url, **params)
            except ValueError as exc:
                raise RedisConfigError(f"invalid REDIS_URL {mask_url(url)!r}: {exc}") from None
            _clients[key] = client
        return client


def check_connection(client: redis.Redis, url: str) -> None:
    """Ping Redis once; on failure raise a one-line ``RedisConfigError`` naming the masked URL."""
    try:
        client.ping()
    except redis.AuthenticationError:
        raise RedisConfigError(
            f"Redis at {mask_url(url)} rejected the password (REDIS_URL)"
        ) from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise RedisConfigError(
                f"Redis at {mask_url(url)} needs a valid password (REDIS_URL): {exc}"
            ) from None
        raise
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisConfigError(
            f"cannot reach Redis at {mask_url(url)} (REDIS_URL): {exc}"
        ) from None
