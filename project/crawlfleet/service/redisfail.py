"""Redis failures of a request handler, as one line for a 503, within a deadline.

``RedisGuard.run`` runs a handler's Redis work under ``REDIS_DEADLINE`` seconds, however
the client's own socket timeouts and retries are set, so a frozen Redis (SIGSTOP, a stuck
host) answers 503 in time and a worker's pool client fails over. Every failure becomes a
``RedisFailure`` with one line: no answer within the deadline, unreachable (the service's
own wording), or a key of the wrong type (``WRONGTYPE``) — named, with its type and the type
the service expected, found with ``TYPE`` on the keys the service declares.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import redis.asyncio as aioredis
import redis.exceptions

REDIS_DEADLINE = 1.5
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
TYPE_NAMES = {"zset": "sorted set", "hash": "hash", "string": "string", "list": "list"}

T = TypeVar("T")


class RedisFailure(Exception):
    """Redis could not serve a request; ``str()`` is the one-line reason."""


@dataclass(frozen=True)
class RedisGuard:
    """How one service's handlers meet Redis.

    ``unreachable`` formats a connection failure with ``{where}`` and ``{error}``;
    ``expected_types`` gives the keys the handlers touch and their Redis types (``TYPE``
    names), so a ``WRONGTYPE`` answer can name the culprit.
    """

    client: aioredis.Redis | None
    where: str
    unreachable: str = "Redis unreachable at {where}: {error}"
    expected_types: Callable[[], Mapping[str, str]] = dict
    deadline: float = REDIS_DEADLINE

    def too_slow(self) -> str:
        return f"Redis at {self.where} did not answer within {self.deadline:g} s"

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self.deadline):
                return await work()
        except TimeoutError:  # before OSError, of which it is a subclass
            raise RedisFailure(self.too_slow()) from None
        except UNREACHABLE as exc:
            raise RedisFailure(self.unreachable.format(where=self.where, error=exc)) from None
        except redis.exceptions.RedisError as exc:
            raise RedisFailure(await self.describe(exc)) from None

    async def describe(self, exc: redis.exceptions.RedisError) -> str:
        """One line for an error answer of Redis (a wrong-typed key named when it can be)."""
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # A pipeline's error quotes the command and its arguments (a password, say): not those.
        text = text.rpartition("of pipeline caused error: ")[2]
        if "WRONGTYPE" not in text:
            return f"Redis at {self.where} answered an error: {text}"
        wrong = await self.wrong_types()
        if not wrong:
            return f"Redis at {self.where}: a key has the wrong type (WRONGTYPE)"
        return "; ".join(wrong)

    async def wrong_types(self) -> list[str]:
        """``key 'k' is a string, expected a hash`` for each declared key of another type."""
        expected = dict(self.expected_types())
        if self.client is None or not expected:
            return []
        try:
            async with asyncio.timeout(self.deadline):
                async with self.client.pipeline(transaction=False) as pipe:
                    for key in expected:
                        pipe.type(key)
                    found = await pipe.execute()
        except (TimeoutError, redis.exceptions.RedisError, OSError):
            return []
        problems = []
        for (key, want), raw in zip(expected.items(), found, strict=True):
            kind = raw.decode() if isinstance(raw, bytes) else str(raw)
            if kind not in ("none", want):
                problems.append(
                    f"Redis key {key!r} is a {TYPE_NAMES.get(kind, kind)}, expected a "
                    f"{TYPE_NAMES.get(want, want)} (WRONGTYPE): delete or rename it"
                )
        return problems
