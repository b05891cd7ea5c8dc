"""The account pool's loops: a cycle every N seconds that survives every error it can raise."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from crawlfleet.hub.urls import mask_url
from crawlfleet.service.runtime import every


async def repeat(
    name: str,
    cycle: Callable[[], Awaitable[object]],
    *,
    interval: float,
    log: logging.Logger,
    redis_url: str,
    stop: asyncio.Event | None = None,
    wake: asyncio.Event | None = None,
) -> None:
    """Call ``cycle`` ``interval`` seconds apart (sooner when ``wake`` is set) until ``stop``.

    A Redis outage or any other error is logged in one line and the next cycle runs on time:
    the loop only ends when ``stop`` is set or its task is cancelled.
    """

    async def guarded() -> None:
        try:
            await cycle()
        except (RedisError, OSError) as exc:
            log.warning(
                "%s cycle skipped: Redis at %s unavailable: %s",
                name,
                mask_url(redis_url),
                exc,
                extra={"event": f"{name}_error"},
            )
        except Exception:
            log.exception("%s cycle failed", name, extra={"event": f"{name}_error"})

    await every(interval, guarded, asyncio.Event() if stop is None else stop, wake=wake)
