"""Run one cycle of a background loop every N seconds, surviving every error a cycle can raise."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from crawlfleet.redisconn import mask_url


async def repeat(
    name: str,
    cycle: Callable[[], Awaitable[object]],
    *,
    interval: float,
    log: logging.Logger,
    redis_url: str,
    wake: asyncio.Event | None = None,
) -> None:
    """Call ``cycle`` forever, ``interval`` seconds apart or sooner when ``wake`` is set.

    A Redis outage or any other error is logged in one line and the next cycle runs on time:
    the loop only ends when its task is cancelled.
    """
    while True:
        if wake is not None:
            wake.clear()
        try:
            await cycle()
        except asyncio.CancelledError:
            raise
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
        if wake is None:
            await asyncio.sleep(interval)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), interval)
