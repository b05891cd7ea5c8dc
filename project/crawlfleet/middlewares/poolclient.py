"""Non-blocking HTTP client of a pool service (proxy pool, account pool), shared by the middlewares.

Runs on Scrapy's asyncio reactor: every call is awaited on the reactor's own event loop, never
blocking it. Reports are fire-and-forget tasks: a pool that is down slows nothing down; the
middleware counts what happened in the crawler's stats under its prefix.

An ``https://`` pool is verified — certificate and host name — against ``<POOL>_CA_FILE``
(``PROXYPOOL_CA_FILE``, ``ACCOUNTPOOL_CA_FILE``), else ``CRAWLFLEET_CA_FILE`` (the fleet's CA,
one file for every pool), else the system's CAs. A certificate that does not verify is one line
naming the pool's host and the cause.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import ssl
from collections.abc import Iterable
from typing import Any, ClassVar, Self

import httpx
from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.settings import BaseSettings
from scrapy.statscollectors import StatsCollector
from scrapy.utils.asyncio import is_asyncio_available

from crawlfleet.hub.connect import tls_problem
from crawlfleet.settingtable import default
from crawlfleet.settingtable.values import flag

#: The fleet's CA bundle, for every pool whose own ``<POOL>_CA_FILE`` is not set.
FLEET_CA_SETTING = "CRAWLFLEET_CA_FILE"

log = logging.getLogger(__name__)


class PoolUnavailable(Exception):
    """The pool did not answer usefully (connection error, timeout, unexpected status)."""


def require_asyncio(component: str) -> None:
    """The middlewares await asyncio code; refuse to run on another reactor (loudly)."""
    try:
        available = is_asyncio_available()
    except RuntimeError:  # neither a reactor nor a running loop: not inside a Scrapy crawl
        available = False
    if not available:
        raise RuntimeError(
            f"{component} needs TWISTED_REACTOR = "
            "'twisted.internet.asyncioreactor.AsyncioSelectorReactor' (Scrapy's default)"
        )


def require_url(value: str | None, setting: str) -> str:
    url = (value or "").strip().rstrip("/")
    if not url:
        raise NotConfigured(f"{setting} is not set")
    if not url.startswith(("http://", "https://")):
        raise NotConfigured(f"{setting} must be an http:// or https:// URL, got {url!r}")
    return url


class Backoff:
    """Exponential back-off with jitter: base, 2*base, 4*base … capped at ``maximum`` seconds."""

    def __init__(self, base: float, maximum: float) -> None:
        if base <= 0 or maximum < base:
            raise ValueError(f"back-off needs 0 < base <= maximum, got {base}, {maximum}")
        self.base = base
        self.maximum = maximum
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.maximum, self.base * 2**self.failures)
        self.failures += 1
        # Jitter keeps many workers from hitting a recovering pool in lockstep.
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0


class PoolClient:
    """GET text from and POST JSON reports to one pool, with its API key in ``X-API-Key``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout: float,
        stats: StatsCollector,
        prefix: str,
        *,
        verify: ssl.SSLContext | bool = True,
        names: tuple[str, str, str] = ("the pool", "its URL", "its CA file"),
    ) -> None:
        self.base_url = base_url
        self.verify = verify
        self.names = names  # (what, URL setting, CA setting) as errors name them
        self.api_key = api_key
        self.timeout = timeout
        self.stats = stats
        self.prefix = prefix
        self._client: httpx.AsyncClient | None = None
        self._reports: set[asyncio.Task[None]] = set()

    @property
    def client(self) -> httpx.AsyncClient:
        # Created lazily, inside the reactor's running loop that will also use it.
        if self._client is None:
            headers = {"X-API-Key": self.api_key} if self.api_key else {}
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=self.timeout,
                trust_env=False,
                verify=self.verify,
            )
        return self._client

    async def get_text(self, path: str, params: dict[str, Any] | None = None) -> str:
        """The body of a 200 answer; any other status (503: the pool is empty) is unavailable."""
        self.stats.inc_value(f"{self.prefix}/pool/requests")
        try:
            resp = await self.client.get(path, params=params)
        except httpx.HTTPError as exc:
            self.stats.inc_value(f"{self.prefix}/pool/error")
            tls = tls_problem(exc, self.base_url, *self.names)
            if tls is not None:
                self.stats.inc_value(f"{self.prefix}/pool/tls_error")
                raise PoolUnavailable(tls) from exc
            raise PoolUnavailable(f"{self.base_url}{path}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            self.stats.inc_value(f"{self.prefix}/pool/error")
            self.stats.inc_value(f"{self.prefix}/pool/status/{resp.status_code}")
            raise PoolUnavailable(
                f"{self.base_url}{path}: HTTP {resp.status_code} {resp.text[:120].strip()}"
            )
        if not resp.text.strip():
            self.stats.inc_value(f"{self.prefix}/pool/empty")
        return resp.text

    def report(self, path: str, body: dict[str, Any]) -> asyncio.Task[None]:
        """POST ``body`` in the background; the caller never waits for the pool."""
        task = asyncio.ensure_future(self._post(path, body))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)
        return task

    async def _post(self, path: str, body: dict[str, Any]) -> None:
        try:
            resp = await self.client.post(path, json=body)
        except httpx.HTTPError as exc:
            self.stats.inc_value(f"{self.prefix}/report/error")
            log.warning("report to %s%s failed: %s", self.base_url, path, type(exc).__name__)
            return
        if resp.status_code == 404:
            # Already gone from the pool (another worker reported it first): nothing to do.
            self.stats.inc_value(f"{self.prefix}/report/gone")
            return
        if resp.status_code >= 300:
            self.stats.inc_value(f"{self.prefix}/report/error")
            log.warning("report to %s%s: HTTP %s", self.base_url, path, resp.status_code)
            return
        self.stats.inc_value(f"{self.prefix}/report/sent")

    async def close(self) -> None:
        """Let pending reports finish (bounded by the timeout), then close the connections."""
        if self._reports:
            await asyncio.wait(set(self._reports), timeout=self.timeout)
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def ca_context(settings: BaseSettings, pool: str) -> tuple[str, ssl.SSLContext | bool]:
    """The CA setting in force for ``pool`` and what httpx verifies with (True: the system's).

    ``<POOL>_CA_FILE`` wins over ``CRAWLFLEET_CA_FILE``; each is read from the settings, then the
    environment. A file that cannot be read is ``NotConfigured`` naming the setting.
    """
    for name in (f"{pool}_CA_FILE", FLEET_CA_SETTING):
        path = settings.get(name) or os.environ.get(name, "")
        if path:
            try:
                return name, ssl.create_default_context(cafile=path)
            except (OSError, ssl.SSLError) as exc:
                reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
                raise NotConfigured(f"{name}: cannot use {path} as a CA bundle: {reason}") from None
    return f"{pool}_CA_FILE", True


def pool_from_settings(
    settings: BaseSettings,
    stats: StatsCollector | None,
    *,
    switch: str,
    pool: str,
    component: str,
    stats_prefix: str,
) -> tuple[PoolClient, Backoff]:
    """The pool client and back-off of a middleware, from its prefixed settings.

    ``switch`` turns the middleware off (``PROXYPOOL_ENABLED``); ``pool`` is the settings prefix
    (``PROXYPOOL``: ``_URL``, ``_API_KEY``, ``_TIMEOUT``, ``_BACKOFF_BASE``, ``_BACKOFF_MAX``);
    ``stats_prefix`` names its counters (``proxy/pool/requests``).
    Raises ``NotConfigured`` with the reason when the middleware cannot work.
    """
    if not flag(settings, switch, default(switch)):
        raise NotConfigured(f"{switch} is False")
    url = require_url(settings.get(f"{pool}_URL"), f"{pool}_URL")
    require_asyncio(component)
    assert stats is not None
    ca_setting, verify = ca_context(settings, pool)
    client = PoolClient(
        url,
        settings.get(f"{pool}_API_KEY") or default(f"{pool}_API_KEY"),
        settings.getfloat(f"{pool}_TIMEOUT", default(f"{pool}_TIMEOUT")),
        stats,
        stats_prefix,
        verify=verify,
        names=(f"the {pool.lower()}", f"{pool}_URL", ca_setting),
    )
    backoff = Backoff(
        settings.getfloat(f"{pool}_BACKOFF_BASE", default(f"{pool}_BACKOFF_BASE")),
        settings.getfloat(f"{pool}_BACKOFF_MAX", default(f"{pool}_BACKOFF_MAX")),
    )
    return client, backoff


class PoolMiddleware:
    """What the two pool middlewares share: the pool's client and back-off from the settings
    prefixed ``POOL`` (off when ``SWITCH`` is false), stats under ``STATS_PREFIX``, and closing
    the client (after cancelling ``running()``) when the spider closes."""

    SWITCH: ClassVar[str]
    POOL: ClassVar[str]
    STATS_PREFIX: ClassVar[str]

    def __init__(self, crawler: Crawler) -> None:
        self.pool, self.backoff = pool_from_settings(
            crawler.settings,
            crawler.stats,
            switch=self.SWITCH,
            pool=self.POOL,
            component=type(self).__name__,
            stats_prefix=self.STATS_PREFIX,
        )
        self.crawler = crawler
        self.stats = self.pool.stats
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def running(self) -> Iterable[asyncio.Task[None]]:
        """The middleware's calls to the pool still under way."""
        return ()

    async def spider_closed(self) -> None:
        for task in list(self.running()):
            task.cancel()
        await self.pool.close()
