"""What the dashboard's pages share: the cached state, the API key check and the page headers.

:class:`Dashboard` holds one snapshot of the cluster (``crawlfleet.views``) shared by the
requests arriving within half a refresh period; ``refused`` answers a request without the API
key; ``html_headers`` are a page's security headers. ``app`` builds the status pages and
``jobs`` the jobs pages on top of this module; neither imports the other.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from crawlfleet.dashboard.config import Settings
from crawlfleet.dashboard.sampler import QueueSampler
from crawlfleet.hub.urls import mask_url
from crawlfleet.service.runtime import every
from crawlfleet.views.bloom import DupefilterCache
from crawlfleet.views.cluster import SCHEMA_VERSION
from crawlfleet.views.crawl import discover_spiders, spider_snapshot
from crawlfleet.views.hub import HubProbe, hub_health, hub_snapshot
from crawlfleet.views.pools import pool_counts

log = logging.getLogger("crawlfleet.dashboard")

REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.AuthenticationError, OSError)
# Spider discovery (a SCAN over the keyspace) and pool counts are refreshed at most this often.
DISCOVER_EVERY = 15.0
POOLS_EVERY = 10.0
REALM = 'Basic realm="crawlfleet dashboard", charset="UTF-8"'
MAX_BODY = 64 * 1024  # the jobs pages' writes (seeded URLs) are the only bodies


def page_html(refresh: float) -> str:
    text = resources.files("crawlfleet.dashboard").joinpath("page.html").read_text("utf-8")
    return text.replace("{{REFRESH_MS}}", str(int(refresh * 1000)))


def _inline_hashes(html: str, tag: str) -> str:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
    digests = (base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() for b in blocks)
    return " ".join(f"'sha256-{d}'" for d in digests)


def content_security_policy(html: str) -> str:
    """Only the page's own inline script and style run, and it talks only to this server."""
    return (
        f"default-src 'none'; script-src {_inline_hashes(html, 'script')}; "
        f"style-src {_inline_hashes(html, 'style')}; connect-src 'self'; img-src data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


class Dashboard:
    """State shared by the handlers and the sampler: the client and short-lived caches."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self.settings = settings
        self.client = client
        self.where = mask_url(settings.redis_url)
        self.sampler = QueueSampler(client, settings.sample_interval)
        self._spiders: list[str] = []
        self._spiders_at = -DISCOVER_EVERY
        self._pools: dict[str, Any] = {}
        self._pools_at = -POOLS_EVERY
        self.dupes = DupefilterCache()
        self.hub_probe = HubProbe()
        self._view: dict[str, Any] | None = None
        self._view_at = 0.0
        self._lock = asyncio.Lock()
        self.last_sample: float | None = None
        self.sample_error: str | None = None

    def spiders(self) -> list[str]:
        if self.settings.spiders:
            return list(self.settings.spiders)
        # Until a crawl appears, look on every call: its first samples matter most.
        if not self._spiders or time.monotonic() - self._spiders_at >= DISCOVER_EVERY:
            self._spiders = discover_spiders(self.client)
            self._spiders_at = time.monotonic()
        return self._spiders

    def pools(self) -> dict[str, Any]:
        if time.monotonic() - self._pools_at >= POOLS_EVERY:
            self._pools = pool_counts(self.settings.pools)
            self._pools_at = time.monotonic()
        return self._pools

    def build(self, *, with_series: bool, with_scrapy: bool = False) -> dict[str, Any]:
        """A fresh view (runs in a worker thread)."""
        # Even with no spider to read (cached discovery), an unreachable Redis must show: the
        # hub's PING comes first.
        hub = hub_health(self.client, self.hub_probe)
        names = self.spiders()
        view: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "time": round(time.time(), 3),
            "redis": self.where,
            "spiders": [
                spider_snapshot(
                    self.client,
                    name,
                    with_series=with_series,
                    with_scrapy=with_scrapy,
                    dupefilter_cache=self.dupes,
                    hub=hub,
                )
                for name in names
            ],
            "pools": self.pools(),
            "refresh": self.settings.refresh,
        }
        # the round trip and CPU share (politeness verdict) and the hub's own numbers (alerts)
        view["hub"] = {**hub, **hub_snapshot(self.client, view["spiders"])}
        return view

    async def page_view(self) -> dict[str, Any]:
        """The view with series, shared by requests within half a refresh period."""
        async with self._lock:
            if self._view is None or time.monotonic() - self._view_at >= self.settings.refresh / 2:
                self._view = await run_in_threadpool(self.build, with_series=True)
                self._view_at = time.monotonic()
            return self._view

    def sample_once(self) -> None:
        for name in self.spiders():
            view = spider_snapshot(self.client, name, dupefilter_cache=self.dupes)
            self.sampler.sample(view)
        self.last_sample = time.time()

    async def run_sampler(self) -> None:
        """Forever (until cancelled): one queue sample per spider and interval."""
        await every(self.settings.sample_interval, self.sample_logged, asyncio.Event())

    async def sample_logged(self) -> None:
        """One round of samples; a Redis error is logged once per outage, not fatal."""
        try:
            await run_in_threadpool(self.sample_once)
            self.sample_error = None
        except REDIS_ERRORS as exc:
            if self.sample_error is None:
                log.warning("sampler: Redis unreachable at %s: %s", self.where, exc)
            self.sample_error = str(exc)


def _authorized(request: Request, key: str) -> bool:
    sent = request.headers.get("x-api-key")
    if sent is not None:
        return hmac.compare_digest(sent.encode(), key.encode())
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        _user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return hmac.compare_digest(password.encode(), key.encode())


def refused(request: Request, key: str) -> Response | None:
    """The 401 answer when a key is set and the request does not carry it, else None."""
    if not key or _authorized(request, key):
        return None
    return PlainTextResponse(
        "authentication required: X-API-Key header or basic auth (password = key)",
        401,
        headers={"WWW-Authenticate": REALM},
    )


def html_headers(html: str, referrer: str) -> dict[str, str]:
    """The headers of a dashboard page: no caching, its own CSP (hashes of its inline parts)."""
    return {
        "Cache-Control": "no-store",
        "Content-Security-Policy": content_security_policy(html),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": referrer,
    }


Handler = Callable[[Request], Awaitable[Response]]
