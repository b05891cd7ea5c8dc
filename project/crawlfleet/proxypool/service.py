"""Running the pool: fetch and test loops, the HTTP server, together or apart, until SIGTERM.

Each loop logs one line per cycle with its counts. A cycle that fails (Redis down, a source
broken) is logged and retried after the interval; the process keeps serving. SIGTERM or SIGINT
stops the loops (a cycle in progress is abandoned: scores are only ever changed per proxy, so
nothing is half-written) and lets the HTTP server finish its requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict
from typing import Any

import httpx
import redis.asyncio as aioredis
import redis.exceptions
import uvicorn

from crawlfleet.proxypool.api import REDIS_ERRORS, create_app
from crawlfleet.proxypool.logs import event
from crawlfleet.proxypool.settings import ConfigError, Settings, describe, require_test_url
from crawlfleet.proxypool.sources import ProxySource, build_sources, fetch_once
from crawlfleet.proxypool.store import ProxyStore, connect
from crawlfleet.proxypool.tester import AnonymityUnavailable, ProxyTester
from crawlfleet.redisconn import mask_url
from crawlfleet.service.http import server_options

log = logging.getLogger("crawlfleet.proxypool")
# (name, seconds between cycles, one cycle returning its counts)
Cycle = tuple[str, float, Callable[[], Awaitable[dict[str, Any]]]]


class StartupError(RuntimeError):
    """The service cannot start (port taken, Redis unreachable for a one-shot run)."""


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the service owns SIGTERM for all its loops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def check_redis(client: aioredis.Redis, settings: Settings, required: bool) -> None:
    """A wrong password is a configuration error; an unreachable Redis only matters if required."""
    where = mask_url(settings.redis_url)
    try:
        await client.ping()
    except redis.exceptions.AuthenticationError as exc:
        raise ConfigError(f"Redis at {where} rejected the credentials (REDIS_URL): {exc}") from None
    except redis.exceptions.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise ConfigError(f"Redis at {where} needs a valid password (REDIS_URL)") from None
        raise
    except REDIS_ERRORS as exc:
        if required:
            raise StartupError(f"cannot reach Redis at {where}: {exc}") from None
        event(
            log,
            "redis_unreachable",
            logging.WARNING,
            redis=where,
            error=str(exc),
            note="serving 503 until it answers",
        )


class Service:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = connect(settings.redis_url)
        self.store = ProxyStore(self.client, settings.redis_key, settings.max_size)
        self.stop = asyncio.Event()

    # ---- one cycle of each kind, returning the counts for the log line

    async def fetch_cycle(self, sources: list[ProxySource]) -> dict[str, Any]:
        async with httpx.AsyncClient(
            timeout=self.settings.source_timeout, follow_redirects=True
        ) as client:
            counts = await fetch_once(sources, self.store, client, self.settings.source_timeout)
        return {**asdict(counts), "pool_size": await self.store.count()}

    async def test_cycle(self, tester: ProxyTester) -> dict[str, Any]:
        counts = await tester.test_once()
        return {**asdict(counts), "pool_size": await self.store.count()}

    async def run_cycle(self, name: str, cycle: Callable[[], Awaitable[dict[str, Any]]]) -> bool:
        """Run one cycle, log its line; False if it failed or was interrupted by a stop."""
        started = time.monotonic()
        task = asyncio.ensure_future(cycle())
        stopping = asyncio.ensure_future(self.stop.wait())
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            event(log, f"{name}_cycle_interrupted", logging.WARNING, reason="stopping")
            return False
        duration = round(time.monotonic() - started, 3)
        exc = task.exception()
        if exc is None:
            event(log, f"{name}_cycle", duration_s=duration, **task.result())
            return True
        if isinstance(exc, REDIS_ERRORS):
            error = f"Redis unreachable at {mask_url(self.settings.redis_url)}: {exc}"
        elif isinstance(exc, AnonymityUnavailable):
            error = str(exc)
        else:
            event(
                log,
                f"{name}_cycle_failed",
                logging.ERROR,
                duration_s=duration,
                error=f"{type(exc).__name__}: {exc}",
                exc_info=exc,
            )
            return False
        event(log, f"{name}_cycle_failed", logging.WARNING, duration_s=duration, error=error)
        return False

    async def loop(
        self, name: str, interval: float, cycle: Callable[[], Awaitable[dict[str, Any]]]
    ) -> None:
        while not self.stop.is_set():
            await self.run_cycle(name, cycle)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=interval)

    # ---- commands

    def _cycles(self, fetch: bool, test: bool) -> list[Cycle]:
        """The cycles this process runs, built (and checked) before anything starts."""
        if test:
            require_test_url(self.settings)
        sources = build_sources(self.settings) if fetch else []
        cycles: list[Cycle] = []
        if fetch:
            if not sources:
                event(
                    log,
                    "no_sources",
                    logging.WARNING,
                    hint="add --proxy, --proxies-file, --source-url or --source-plugin",
                )
            cycles.append(
                ("fetch", self.settings.fetch_interval, lambda: self.fetch_cycle(sources))
            )
        if test:
            tester = ProxyTester(self.settings, self.store)
            cycles.append(("test", self.settings.test_interval, lambda: self.test_cycle(tester)))
        return cycles

    def _listen(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.settings.host.strip("[]"), self.settings.port))
        except OSError as exc:
            sock.close()
            raise StartupError(
                f"cannot listen on {self.settings.host}:{self.settings.port}: {exc.strerror}"
            ) from None
        sock.listen(2048)
        sock.setblocking(False)
        return sock

    def _handle_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if not self.stop.is_set():
            event(log, "stopping", signal=sig.name)
        self.stop.set()

    async def serve(self) -> int:
        cycles = self._cycles(self.settings.fetch_loop, self.settings.test_loop)
        sock = self._listen()
        await check_redis(self.client, self.settings, required=False)
        self._handle_signals()
        config = uvicorn.Config(
            create_app(self.settings, self.store),
            log_config=None,
            access_log=False,
            lifespan="off",
            server_header=False,
            **server_options(),
        )
        server = _Server(config)
        event(log, "started", command="serve", **describe(self.settings))
        http = asyncio.create_task(server.serve(sockets=[sock]))
        loops = [asyncio.create_task(self.loop(*cycle)) for cycle in cycles]
        stopping = asyncio.create_task(self.stop.wait())
        await asyncio.wait({http, stopping}, return_when=asyncio.FIRST_COMPLETED)
        failed = http.done()  # the HTTP server ended without being asked to
        self.stop.set()
        server.should_exit = True
        await asyncio.gather(*loops)
        try:
            await http
        except Exception as exc:
            event(log, "http_failed", logging.ERROR, error=f"{type(exc).__name__}: {exc}")
            failed = True
        await self.client.aclose()
        event(log, "stopped", command="serve")
        return 1 if failed else 0

    async def run_alone(self, command: str) -> int:
        """``fetch`` or ``test`` alone: one cycle with ``--once`` (1 if it failed), else a loop."""
        ((name, interval, cycle),) = self._cycles(command == "fetch", command == "test")
        await check_redis(self.client, self.settings, required=self.settings.once)
        self._handle_signals()
        event(log, "started", command=command, **describe(self.settings))
        try:
            if self.settings.once:
                return 0 if await self.run_cycle(name, cycle) else 1
            await self.loop(name, interval, cycle)
            return 0
        finally:
            await self.client.aclose()
            event(log, "stopped", command=command)
