"""AuthorizationMiddleware: every request carries a logged-in token from the account pool.

One token per site is cached (``GET /<site>/random``, text/plain) and put into the request's
``Authorization`` header (format ``AUTHORIZATION_FORMAT``, the book's ``jwt {token}``). When the
site rejects it (``AUTHORIZATION_REJECT_STATUS``, 401), the token is reported
(``POST /<site>/report``), a fresh one is fetched and the request retried with it. With no token
available, requests wait (exponential back-off on the pool): nothing goes out unauthenticated.
"""

from __future__ import annotations

import asyncio
import logging

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response

from crawlfleet.middlewares.poolclient import PoolMiddleware, PoolUnavailable
from crawlfleet.settingtable import default

log = logging.getLogger(__name__)

META_SITE = "accountpool_site"  # per-request override of the site name
META_TOKEN = "accountpool_token"  # noqa: S105 (a meta key, not a secret)
META_RETRIES = "accountpool_retries"
META_SKIP = "dont_authorize"  # e.g. for pages that must be fetched anonymously


class AuthorizationMiddleware(PoolMiddleware):
    SWITCH = "AUTHORIZATION_ENABLED"
    POOL = "ACCOUNTPOOL"
    STATS_PREFIX = "auth"

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        s = crawler.settings
        self.default_site = s.get("ACCOUNTPOOL_SITE") or default("ACCOUNTPOOL_SITE")
        self.header = s.get("AUTHORIZATION_HEADER") or default("AUTHORIZATION_HEADER")
        self.format = s.get("AUTHORIZATION_FORMAT") or default("AUTHORIZATION_FORMAT")
        if "{token}" not in self.format:
            raise ValueError(f"AUTHORIZATION_FORMAT must contain {{token}}, got {self.format!r}")
        self.reject_statuses = {
            int(x)
            for x in s.getlist(
                "AUTHORIZATION_REJECT_STATUS", default("AUTHORIZATION_REJECT_STATUS")
            )
        }
        self.max_retries = s.getint(
            "AUTHORIZATION_MAX_RETRIES", default("AUTHORIZATION_MAX_RETRIES")
        )
        self.tokens: dict[str, str] = {}
        self._fetches: dict[str, asyncio.Task[None]] = {}
        # Tokens the site rejected (per site), in case the pool offers one again before it
        # has processed our report; and the report in flight, which a refetch waits for.
        self._rejected: dict[str, set[str]] = {}
        self._reporting: dict[str, asyncio.Task[None]] = {}

    def site_of(self, request: Request) -> str:
        spider_site = getattr(self.crawler.spider, "accountpool_site", None)
        return str(request.meta.get(META_SITE) or spider_site or self.default_site)

    async def _fetch_token(self, site: str) -> None:
        """Ask the pool until it gives a token for ``site`` (backing off between attempts)."""
        try:
            report = self._reporting.get(site)
            if report is not None and not report.done():
                await asyncio.wait({report}, timeout=self.pool.timeout)
            while True:
                try:
                    token = (await self.pool.get_text(f"/{site}/random")).strip()
                    problem = "" if token else "no token available"
                except PoolUnavailable as exc:
                    token, problem = "", str(exc)
                if token in self._rejected.get(site, ()):
                    self.stats.inc_value("auth/pool/stale")
                    token, problem = "", "the pool offered a token the site already rejected"
                if token:
                    self.tokens[site] = token
                    self.stats.inc_value("auth/pool/fetched")
                    self.backoff.reset()
                    return
                delay = self.backoff.next_delay()
                self.stats.inc_value("auth/backoff/count")
                log.warning("account pool (%s): %s; retrying in %.1fs", site, problem, delay)
                await asyncio.sleep(delay)
        finally:
            self._fetches.pop(site, None)

    async def get_token(self, site: str) -> str:
        waited = False
        while (token := self.tokens.get(site)) is None:
            waited = True
            fetch = self._fetches.get(site)
            if fetch is None:
                fetch = self._fetches[site] = asyncio.ensure_future(self._fetch_token(site))
            # shield: one waiter being cancelled must not cancel the shared fetch.
            await asyncio.shield(fetch)
        if waited:
            self.stats.inc_value("auth/wait/count")
        return token

    async def process_request(self, request: Request) -> None:
        if request.meta.get(META_SKIP):
            return
        site = self.site_of(request)
        token = await self.get_token(site)
        request.headers[self.header] = self.format.format(token=token)
        request.meta[META_TOKEN] = token
        self.stats.inc_value("auth/assigned")

    def process_response(self, request: Request, response: Response) -> Request | Response:
        token = request.meta.get(META_TOKEN)
        if token is None or response.status not in self.reject_statuses:
            return response
        site = self.site_of(request)
        self.stats.inc_value("auth/rejected")
        # Many in-flight requests fail with the same token: report and drop it only once.
        if self.tokens.get(site) == token:
            del self.tokens[site]
            rejected = self._rejected.setdefault(site, set())
            if len(rejected) >= 1000:
                rejected.clear()  # bounded memory; old tokens have long expired anyway
            rejected.add(token)
            self._reporting[site] = self.pool.report(
                f"/{site}/report", {"token": token, "reason": "rejected"}
            )
            self.stats.inc_value("auth/report/rejected")
            log.info(
                "token for %s rejected (HTTP %s); reported, fetching another", site, response.status
            )
        retries = int(request.meta.get(META_RETRIES, 0)) + 1
        if retries > self.max_retries:
            self.stats.inc_value("auth/retry/max_reached")
            log.error("gave up on %s after %d tokens", request.url, retries - 1)
            return response
        self.stats.inc_value("auth/retry/count")
        retry = request.copy()
        retry.meta[META_RETRIES] = retries
        retry.dont_filter = True
        return retry

    def running(self) -> list[asyncio.Task[None]]:
        return list(self._fetches.values())
