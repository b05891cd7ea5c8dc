"""Running the pool: fetch and test loops, the HTTP server, together or apart, until SIGTERM.

Each loop logs one line per cycle with its counts. A cycle that fails (Redis down, a source
broken) is logged and retried after the interval; the process keeps serving. SIGTERM or SIGINT
stops the loops (a cycle in progress is abandoned: scores are only ever changed per proxy, so
nothing is half-written) and lets the HTTP server finish its requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

import httpx

from crawlfleet.hub.urls import mask_url
from crawlfleet.proxypool.api import REDIS_ERRORS, create_app
from crawlfleet.proxypool.config import Settings, describe, require_test_url
from crawlfleet.proxypool.sources import ProxySource, build_sources, fetch_once
from crawlfleet.proxypool.store import ProxyStore, connect
from crawlfleet.proxypool.tester import AnonymityUnavailable, ProxyTester
from crawlfleet.service import runtime
from crawlfleet.service.logs import event

log = logging.getLogger("crawlfleet.proxypool")
# (name, seconds between cycles, one cycle returning its counts)
Cycle = tuple[str, float, Callable[[], Awaitable[dict[str, Any]]]]


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
        """Run one cycle, log its line; False if it failed (a stop cancels it: logged too)."""
        started = time.monotonic()
        try:
            counts = await cycle()
        except asyncio.CancelledError:
            event(log, f"{name}_cycle_interrupted", logging.WARNING, reason="stopping")
            raise
        except Exception as exc:
            self.log_failure(name, round(time.monotonic() - started, 3), exc)
            return False
        event(log, f"{name}_cycle", duration_s=round(time.monotonic() - started, 3), **counts)
        return True

    def log_failure(self, name: str, duration: float, exc: Exception) -> None:
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
            return
        event(log, f"{name}_cycle_failed", logging.WARNING, duration_s=duration, error=error)

    async def loop(
        self, name: str, interval: float, cycle: Callable[[], Awaitable[dict[str, Any]]]
    ) -> None:
        await runtime.every(interval, lambda: self.run_cycle(name, cycle), self.stop)

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

    async def serve(self) -> int:
        cycles = self._cycles(self.settings.fetch_loop, self.settings.test_loop)
        sock = runtime.bind(self.settings.host, self.settings.port, "--host/PROXYPOOL_HOST")
        try:
            await runtime.check_redis(self.client, self.settings.redis_url, required=False, log=log)
            runtime.on_stop_signals(self.stop, log)
            event(log, "started", command="serve", **describe(self.settings))
            app = create_app(self.settings, self.store)
            loops = [self.loop(*cycle) for cycle in cycles]
            status = await runtime.serve(
                app,
                sock,
                self.stop,
                loops=loops,
                log=log,
                tls_cert=self.settings.tls_cert,
                tls_key=self.settings.tls_key,
            )
        finally:
            sock.close()
            await self.client.aclose()
        event(log, "stopped", command="serve")
        return status

    async def run_alone(self, command: str) -> int:
        """``fetch`` or ``test`` alone: one cycle with ``--once`` (1 if it failed), else a loop."""
        ((name, interval, cycle),) = self._cycles(command == "fetch", command == "test")
        await runtime.check_redis(
            self.client, self.settings.redis_url, required=self.settings.once, log=log
        )
        runtime.on_stop_signals(self.stop, log)
        event(log, "started", command=command, **describe(self.settings))
        try:
            if self.settings.once:
                _, passed = await runtime.until_stopped(self.run_cycle(name, cycle), self.stop)
                return 0 if passed else 1
            await self.loop(name, interval, cycle)
            return 0
        finally:
            await self.client.aclose()
            event(log, "stopped", command=command)
