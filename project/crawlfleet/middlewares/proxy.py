"""ProxyMiddleware: every request goes out through a proxy from the proxy pool.

Proxies come in batches (``GET /random?count=N``, one ``host:port`` or proxy URL a line) and are
rotated across requests; a batch is refreshed in the background, so the pool sees one call per
batch, never one per request. A proxy that is banned (``PROXYPOOL_BAN_STATUS``) or fails at the
connection level is reported (``POST /report``), kept out of rotation for a while, and the request
is retried through another proxy. With no usable proxy, requests wait (exponential back-off on
the pool) instead of going out directly.

With the politeness pacer (``crawlfleet.politeness``: its middleware enabled, and a ``REDIS_URL``)
the middleware registers its usable proxies with it and sends each request through the proxy the
frontier scheduler chose (``politeness_proxy``), or else the one whose (site, proxy) slot comes
first. A ban status is then the site's word about that pair only: the pacer cools the pair down
for that site (ending by itself), so the proxy is neither quarantined nor reported to the pool;
the request is still retried through another proxy. Connection failures are reported as before.
"""

from __future__ import annotations

import asyncio
import logging
import time

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.crawler import Crawler
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    ResponseDataLossError,
)
from scrapy.http import Response
from twisted.internet import error as net_error
from twisted.web.client import ResponseFailed, ResponseNeverReceived

from crawlfleet.middlewares.poolclient import PoolMiddleware, PoolUnavailable
from crawlfleet.politeness.pacer import META_PROXY as META_CHOSEN
from crawlfleet.politeness.pacer import pacer_for
from crawlfleet.settingtable import default

log = logging.getLogger(__name__)

# Failures that say "this proxy did not work", not "the site answered" (Scrapy 2.19 raises its
# own Download* exceptions; the Twisted ones are kept for other download handlers).
PROXY_ERRORS: tuple[type[BaseException], ...] = (
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    DownloadFailedError,
    ResponseDataLossError,
    CannotResolveHostError,
    net_error.ConnectError,
    net_error.ConnectionDone,
    net_error.ConnectionLost,
    net_error.TimeoutError,
    net_error.DNSLookupError,
    ResponseFailed,
    ResponseNeverReceived,
    TunnelError,
    TimeoutError,
    ConnectionError,
)

META_PROXY = "proxypool_proxy"
META_RETRIES = "proxypool_retries"


def proxy_url(line: str) -> str:
    """``host:port`` from the pool means a plain HTTP proxy; URLs are kept as they are."""
    return line if "://" in line else f"http://{line}"


class ProxyMiddleware(PoolMiddleware):
    SWITCH = "PROXYPOOL_ENABLED"
    POOL = "PROXYPOOL"
    STATS_PREFIX = "proxy"

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        s = crawler.settings
        self.batch_size = s.getint("PROXYPOOL_BATCH_SIZE", default("PROXYPOOL_BATCH_SIZE"))
        self.refresh_interval = s.getfloat(
            "PROXYPOOL_REFRESH_INTERVAL", default("PROXYPOOL_REFRESH_INTERVAL")
        )
        self.quarantine = s.getfloat("PROXYPOOL_QUARANTINE", default("PROXYPOOL_QUARANTINE"))
        self.ban_statuses = {
            int(x) for x in s.getlist("PROXYPOOL_BAN_STATUS", default("PROXYPOOL_BAN_STATUS"))
        }
        self.max_retries = s.getint("PROXYPOOL_MAX_RETRIES", default("PROXYPOOL_MAX_RETRIES"))
        if self.batch_size < 1:
            raise ValueError(f"PROXYPOOL_BATCH_SIZE must be >= 1, got {self.batch_size}")
        self.proxies: list[str] = []
        self.bad_until: dict[str, float] = {}
        self._cursor = 0
        self._next_fetch_at = 0.0  # the batch is stale from then on
        self._earliest_fetch_at = 0.0  # no refetch before then (back-off, or 1 s after a batch)
        self._fetch: asyncio.Task[None] | None = None
        self.pacer = pacer_for(crawler)
        if self.pacer is not None:
            self.pacer.use_proxies(lambda: self._live(time.monotonic()))

    # -- choosing a proxy ------------------------------------------------------------------
    def _live(self, now: float) -> list[str]:
        return [p for p in self.proxies if self.bad_until.get(p, 0.0) <= now]

    def _start_fetch(self, now: float, live: int) -> None:
        stale = now >= self._next_fetch_at
        mostly_bad = live * 2 < len(self.proxies)
        due = now >= self._earliest_fetch_at and (stale or mostly_bad)
        if self._fetch is None and (live == 0 or due):
            self._fetch = asyncio.ensure_future(self._fetch_batch(wait=live == 0))

    async def _fetch_batch(self, wait: bool) -> None:
        """One batch from the pool; with ``wait``, keep trying (backing off) until one arrives."""
        try:
            while True:
                try:
                    text = await self.pool.get_text("/random", {"count": self.batch_size})
                    batch = list(dict.fromkeys(p.strip() for p in text.splitlines() if p.strip()))
                    problem = "" if batch else "no proxies"
                except PoolUnavailable as exc:
                    batch, problem = [], str(exc)
                now = time.monotonic()
                if batch:
                    self.proxies = [proxy_url(p) for p in batch]
                    self.bad_until = {p: t for p, t in self.bad_until.items() if t > now}
                    self.stats.inc_value("proxy/pool/batches")
                    self.stats.inc_value("proxy/pool/fetched", len(batch))
                    self._next_fetch_at = now + self.refresh_interval
                    self._earliest_fetch_at = now + 1.0
                    if self._live(now):
                        self.backoff.reset()
                        return
                    # The pool still offers only proxies we saw banned: asking again at once
                    # would hammer it, so this counts as "nothing usable" and backs off.
                    problem = f"all {len(batch)} proxies offered are in quarantine"
                delay = self.backoff.next_delay()
                ends = [t for p in self.proxies if (t := self.bad_until.get(p, 0.0)) > now]
                if ends:
                    # No point waiting past the moment a quarantined proxy may be used again.
                    delay = max(0.05, min(delay, min(ends) - now))
                self._earliest_fetch_at = now + delay
                if not wait and self._live(now):
                    log.warning(
                        "proxy pool: %s; keeping %d cached proxies", problem, len(self.proxies)
                    )
                    return
                self.stats.inc_value("proxy/backoff/count")
                log.warning("proxy pool: %s; no usable proxy, retrying in %.1fs", problem, delay)
                await asyncio.sleep(delay)
        finally:
            self._fetch = None

    async def get_proxy(self, url: str = "", chosen: str | None = None) -> str:
        """A usable proxy: ``chosen`` (the scheduler's pick) while it is usable; with the pacer
        the one whose (site, proxy) slot for ``url`` comes first; else the next in rotation."""
        waited = False
        while True:
            now = time.monotonic()
            live = self._live(now)
            self._start_fetch(now, len(live))
            if live:
                if waited:
                    self.stats.inc_value("proxy/wait/count")
                if chosen in live:
                    return str(chosen)
                if self.pacer is not None and url:
                    return str(self.pacer.best(url, live)[1])
                self._cursor += 1
                return live[self._cursor % len(live)]
            waited = True
            fetch = self._fetch
            if fetch is not None:
                # shield: one waiter being cancelled must not cancel the shared fetch.
                await asyncio.shield(fetch)

    # -- the middleware hooks ----------------------------------------------------------------
    async def process_request(self, request: Request) -> None:
        if "proxy" in request.meta and META_PROXY not in request.meta:
            self.stats.inc_value("proxy/user_set")  # the spider chose a proxy itself
            return
        proxy = await self.get_proxy(request.url, request.meta.pop(META_CHOSEN, None))
        # One download slot per proxy: Scrapy's per-slot concurrency then limits each address.
        if request.meta.get("download_slot") in (None, request.meta.get(META_PROXY)):
            request.meta["download_slot"] = proxy
        request.meta["proxy"] = proxy
        request.meta[META_PROXY] = proxy
        self.stats.inc_value("proxy/assigned")

    def process_response(self, request: Request, response: Response) -> Request | Response:
        proxy = request.meta.get(META_PROXY)
        if proxy is None or response.status not in self.ban_statuses:
            return response
        self.stats.inc_value("proxy/banned")
        if self.pacer is None:
            self._report(proxy, "banned")
        # else: the PolitenessMiddleware cooled the (proxy, site) pair down for this site only
        return self._retry(request, f"HTTP {response.status}") or response

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        proxy = request.meta.get(META_PROXY)
        if proxy is None or not isinstance(exception, PROXY_ERRORS):
            return None
        self.stats.inc_value("proxy/failed")
        self._report(proxy, "failed")
        return self._retry(request, type(exception).__name__)

    def _report(self, proxy: str, reason: str) -> None:
        """Tell the pool once per quarantine period, and stop using the proxy meanwhile."""
        now = time.monotonic()
        if self.bad_until.get(proxy, 0.0) > now:
            return
        self.bad_until[proxy] = now + self.quarantine
        address = proxy.removeprefix("http://")
        self.pool.report("/report", {"proxy": address, "reason": reason})
        self.stats.inc_value(f"proxy/report/{reason}")
        log.info("proxy %s %s; reported to the pool, retrying elsewhere", address, reason)

    def _retry(self, request: Request, why: str) -> Request | None:
        retries = int(request.meta.get(META_RETRIES, 0)) + 1
        if retries > self.max_retries:
            self.stats.inc_value("proxy/retry/max_reached")
            log.error("gave up on %s after %d proxies (%s)", request.url, retries - 1, why)
            return None
        self.stats.inc_value("proxy/retry/count")
        retry = request.copy()
        retry.meta[META_RETRIES] = retries
        retry.dont_filter = True
        return retry

    def running(self) -> list[asyncio.Task[None]]:
        return [] if self._fetch is None else [self._fetch]
