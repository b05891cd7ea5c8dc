"""The HTTP API (Starlette): tokens out, accounts in, reports back, health and metrics.

``GET /<site>/random`` answers one token as ``text/plain`` (what the book's middleware
expects), chosen in Redis by rank among the credentials still valid for ``min_ttl`` seconds.
Every endpoint except ``/health`` and ``/metrics`` requires ``X-API-Key`` when a key is
configured; ``POST /<site>/accounts`` and ``DELETE /<site>/accounts/<username>`` always
require one (passwords never travel unauthenticated). A username may contain ``/``: the
delete route takes the rest of the path (``/<site>/accounts/team/alice`` or ``team%2Falice``).
Errors are JSON ``{"error": "..."}``, one line: a Redis failure (down, frozen past the
deadline, a key of the wrong type, named) is a 503; the shared request guard
(``crawlfleet.service.http``) checks Host, cross-site writes and body size first.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from crawlfleet.accountpool.accounts import parse_accounts_json
from crawlfleet.accountpool.metrics import CONTENT_TYPE, Metrics, Snapshot
from crawlfleet.accountpool.store import AccountStore, Keys
from crawlfleet.hub.urls import mask_url, redis_location
from crawlfleet.service.http import GuardPolicy, install_guard, parse_json
from crawlfleet.service.redisfail import RedisFailure, RedisGuard

MAX_BODY_BYTES = 1 << 20

Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class ApiState:
    store: AccountStore
    redis_url: str
    sites: Sequence[str]
    api_key: str | None
    min_ttl: float
    # Set when a credential is reported or accounts are added: the generator runs at once.
    wake: asyncio.Event | None = None
    metrics: Metrics = field(default_factory=Metrics)


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _key_types(sites: Sequence[str], client: object) -> dict[str, str]:
    """Every per-site key the handlers touch, with its Redis type (see ``store``)."""
    types: dict[str, str] = {}
    for site in sites:
        keys = Keys(site, client)
        for name in ("accounts", "failures", "reason", "credentials", "tokens", "stats", "status"):
            types[getattr(keys, name)] = "hash"
        types[keys.parked] = "zset"
        types[keys.expiry] = "zset"
    return types


class AccountPoolApi:
    def __init__(self, state: ApiState) -> None:
        self.state = state
        self.masked_url = mask_url(state.redis_url)
        self.redis = RedisGuard(
            state.store.redis,
            self.masked_url,
            unreachable="Redis unavailable at {where}: {error}",
            expected_types=lambda: _key_types(state.sites, state.store.redis),
        )
        routes = [
            Route("/health", self._counted("health", self.health, auth=False)),
            Route("/metrics", self._counted("metrics", self.metrics, auth=False)),
            Route("/{site}/random", self._counted("random", self._for_site(self.random))),
            Route("/{site}/count", self._counted("count", self._for_site(self.count))),
            Route(
                "/{site}/accounts",
                self._counted("accounts", self._for_site(self.accounts)),
                methods=["POST"],
            ),
            Route(
                "/{site}/accounts/{username:path}",
                self._counted("accounts", self._for_site(self.delete_account)),
                methods=["DELETE"],
            ),
            Route(
                "/{site}/report",
                self._counted("report", self._for_site(self.report)),
                methods=["POST"],
            ),
        ]
        self.app = Starlette(routes=routes)
        install_guard(
            self.app,
            GuardPolicy.keyed(_error, MAX_BODY_BYTES, required=state.api_key is not None),
        )

    # --- wrappers -------------------------------------------------------------------------

    def _key_problem(self, request: Request) -> str | None:
        """Why the request's ``X-API-Key`` is refused (the proxy pool's wording), or None."""
        expected = self.state.api_key
        if expected is None:
            return None
        given = request.headers.get("x-api-key")
        if not given:
            return "missing X-API-Key header"
        if not hmac.compare_digest(expected.encode(), given.encode()):
            return "invalid API key"
        return None

    def _counted(self, endpoint: str, handler: Handler, *, auth: bool = True) -> Handler:
        async def wrapped(request: Request) -> Response:
            problem = self._key_problem(request) if auth else None
            if problem is not None:
                response: Response = _error(401, problem)
            else:
                await request.body()  # read (and bounded) before the Redis deadline starts
                try:
                    response = await self.redis.run(lambda: handler(request))
                except RedisFailure as exc:
                    response = _error(503, str(exc))
            self.state.metrics.requests.labels(endpoint, str(response.status_code)).inc()
            return response

        return wrapped

    def _for_site(self, handler: Callable[[Request, str], Awaitable[Response]]) -> Handler:
        async def wrapped(request: Request) -> Response:
            site = request.path_params["site"]
            if site not in self.state.sites:
                return _error(404, f"unknown site {site!r}", known_sites=sorted(self.state.sites))
            return await handler(request, site)

        return wrapped

    def _wake(self) -> None:
        if self.state.wake is not None:
            self.state.wake.set()

    # --- endpoints ------------------------------------------------------------------------

    async def random(self, request: Request, site: str) -> Response:
        valid_until = time.time() + self.state.min_ttl
        token = await self.state.store.random_token(site, valid_until)
        if token is None:
            counts = await self.state.store.counts(site, valid_until)
            return _error(
                503,
                f"no valid credential for site {site!r} yet "
                f"({counts.accounts} accounts, {counts.parked} parked after failed logins)",
                accounts=counts.accounts,
                parked=counts.parked,
            )
        return PlainTextResponse(token, headers={"Cache-Control": "no-store"})

    async def count(self, request: Request, site: str) -> Response:
        counts = await self.state.store.counts(site, time.time() + self.state.min_ttl)
        return JSONResponse(
            {
                "site": site,
                "count": counts.valid,
                "accounts": counts.accounts,
                "credentials": counts.credentials,
                "parked": counts.parked,
            }
        )

    def _accounts_need_key(self) -> Response | None:
        if self.state.api_key is not None:
            return None
        return _error(
            403,
            "changing accounts over HTTP needs an API key: set ACCOUNTPOOL_API_KEY, "
            "or use `crawlfleet accountpool import`",
        )

    async def accounts(self, request: Request, site: str) -> Response:
        refused = self._accounts_need_key()
        if refused is not None:
            return refused
        try:
            data = parse_json(await request.body())
        except ValueError as exc:
            return _error(400, f"body must be JSON ({exc})")
        try:
            good, errors = parse_accounts_json(data)
        except ValueError as exc:
            return _error(400, str(exc))
        added, updated = await self.state.store.add_accounts(site, good)
        if good:
            self._wake()
        return JSONResponse(
            {"site": site, "added": added, "updated": updated, "skipped": errors},
            status_code=200 if good or not errors else 400,
        )

    async def delete_account(self, request: Request, site: str) -> Response:
        refused = self._accounts_need_key()
        if refused is not None:
            return refused
        username = request.path_params["username"]
        if not await self.state.store.remove_account(site, username):
            return _error(404, f"no account {username!r} for site {site!r}")
        return JSONResponse({"site": site, "removed": username})

    async def report(self, request: Request, site: str) -> Response:
        body = await request.body()
        token: object
        if request.headers.get("content-type", "").startswith("application/json"):
            try:
                data = parse_json(body)
            except ValueError:
                return _error(400, 'body must be JSON {"token": "..."} or the token as text')
            token = data.get("token") if isinstance(data, dict) else None
        else:
            token = body.decode("utf-8", "replace").strip()
        if not isinstance(token, str) or not token:
            return _error(400, 'body must be JSON {"token": "..."} or the token as text')
        user = await self.state.store.report(site, token)
        if user is not None:
            await self.state.store.incr_many(site, {"reports": 1})
            self._wake()
        return JSONResponse({"site": site, "removed": user is not None})

    async def _site_health(self) -> dict[str, object]:
        await self.state.store.redis.ping()
        valid_until = time.time() + self.state.min_ttl
        sites: dict[str, object] = {}
        for site in self.state.sites:
            counts = await self.state.store.counts(site, valid_until)
            sites[site] = {
                "accounts": counts.accounts,
                "valid": counts.valid,
                **await self.state.store.status(site),
            }
        return sites

    async def health(self, request: Request) -> Response:
        # Unauthenticated: Redis is named by host, port and database only, never the URL.
        location = redis_location(self.state.redis_url)
        try:
            sites = await self.redis.run(self._site_health)
        except RedisFailure as exc:
            return JSONResponse(
                {
                    "status": "unavailable",
                    "error": str(exc).replace(self.masked_url, location),
                    "redis": {"url": location, "ok": False},
                },
                status_code=503,
            )
        return JSONResponse(
            {"status": "ok", "redis": {"url": location, "ok": True}, "sites": sites}
        )

    async def metrics(self, request: Request) -> Response:
        snapshot = Snapshot()

        async def read() -> None:
            valid_until = time.time() + self.state.min_ttl
            for site in self.state.sites:
                snapshot.counts[site] = await self.state.store.counts(site, valid_until)
                snapshot.counters[site] = await self.state.store.counters(site)
            snapshot.redis_up = True

        try:
            await self.redis.run(read)
        except RedisFailure:
            snapshot = Snapshot()  # partial numbers would look like a drop to zero
        return Response(self.state.metrics.render(snapshot), media_type=CONTENT_TYPE)


def create_app(state: ApiState) -> Starlette:
    return AccountPoolApi(state).app
