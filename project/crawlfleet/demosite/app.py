"""The demo site's HTTP application: catalogue API, JWT login, per-client-IP rate limit and bans.

A stand-in for the book's target (antispider7): every ``/api`` call except login needs
``Authorization: jwt <token>``; an address that sends more than ``rate_limit`` API requests in
``rate_window`` seconds is banned for ``ban_seconds``. State (counters, bans, revocations) lives
in the worker process, so the checks are exact with one worker. The shared request guard
(``crawlfleet.service.http``) bounds bodies to ``MAX_BODY`` bytes and refuses unknown Host
names and cross-site writes; JSON bodies are read strictly (400 with one line, never 500).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import jwt
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crawlfleet.demosite import linkgraph
from crawlfleet.demosite.catalogue import Catalogue
from crawlfleet.demosite.config import BAN_PAGE_MARKER, CONFIG_ENV, ConfigError, SiteConfig
from crawlfleet.service.http import GuardPolicy, install_guard, parse_json

log = logging.getLogger("crawlfleet.demosite")

Handler = Callable[[Request], Awaitable[Response]]
# Settings /api/admin/config may change while the site runs (tests and demos tighten the site).
TUNABLE = ("rate_limit", "rate_window", "ban_seconds", "ban_status", "latency_ms")
# The admin API's largest step of the site's clock (a year, in seconds).
MAX_CLOCK_STEP = 366 * 86400
# The admin API's ceiling for latency_ms: a request may be slow, the site must still stop.
MAX_LATENCY_MS = 60_000
MAX_BODY = 64 * 1024


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


async def _json_object(request: Request) -> dict[str, Any] | None:
    """The request's body when it is a JSON object, else None (the caller says what it wants)."""
    try:
        body = parse_json(await request.body())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _finite(value: float) -> bool:
    """False for inf, nan and integers too large to be a float (``1e400``, ``10**400``)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


class SiteClock:
    """The site's sense of time: the machine's clocks plus an offset the admin API can advance.

    Tests and demos move the site's time forward (a token expires, a ban ends) instead of
    sleeping through it: ``POST /api/admin/clock {"advance_seconds": N}``.
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def wall(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


class RateLimiter:
    """Fixed-window request counter per address; crossing the limit bans the address."""

    def __init__(self, limit: int, window: float, ban_seconds: float) -> None:
        self.limit = limit
        self.window = window
        self.ban_seconds = ban_seconds
        self._windows: dict[str, tuple[float, int]] = {}
        self._bans: dict[str, float] = {}
        self.bans_total = 0

    def banned_for(self, address: str, now: float) -> float:
        """Seconds left of the address's ban (0 when not banned)."""
        until = self._bans.get(address)
        if until is None:
            return 0.0
        if until <= now:
            del self._bans[address]
            return 0.0
        return until - now

    def hit(self, address: str, now: float) -> bool:
        """Count one request; True when this request crossed the limit and banned the address."""
        if self.limit <= 0:
            return False
        start, count = self._windows.get(address, (now, 0))
        if now - start >= self.window:
            start, count = now, 0
        count += 1
        self._windows[address] = (start, count)
        if count > self.limit:
            self._bans[address] = now + self.ban_seconds
            self._windows.pop(address, None)
            self.bans_total += 1
            return True
        if len(self._windows) > 10_000:
            # Forget idle addresses so a scan of many sources cannot grow memory without bound.
            self._windows = {a: v for a, v in self._windows.items() if now - v[0] < self.window}
        return False

    def banned_addresses(self, now: float) -> list[str]:
        return sorted(a for a, until in self._bans.items() if until > now)


class Tokens:
    """Issues and checks HS256 JWTs; revocation by token id, by user, or of everything so far."""

    def __init__(self, secret: str, ttl: float, clock: SiteClock) -> None:
        self.secret = secret
        self.ttl = ttl
        self.clock = clock
        self._revoked_ids: set[str] = set()
        self._revoked_before: dict[str, int] = {}  # username ("*" = all) -> issued-at ns cut-off

    def issue(self, username: str) -> str:
        now = self.clock.wall()
        claims = {
            "sub": username,
            "jti": uuid.uuid4().hex,
            "iat": int(now),
            "exp": int(now + self.ttl),
            "ins": time.time_ns(),  # exact issue time, so revocation cut-offs are not per-second
        }
        return jwt.encode(claims, self.secret, algorithm="HS256")

    def check(self, token: str) -> tuple[dict[str, Any] | None, str]:
        """(claims, "") for a valid token, else (None, reason)."""
        try:
            # expiry is checked against the site's clock below, not PyJWT's
            claims: dict[str, Any] = jwt.decode(
                token,
                self.secret,
                algorithms=["HS256"],
                options={"require": ["exp", "sub"], "verify_exp": False},
            )
        except jwt.InvalidTokenError:
            return None, "invalid token"
        exp = claims["exp"]
        if isinstance(exp, bool) or not isinstance(exp, int | float):
            return None, "invalid token"
        if exp <= self.clock.wall():
            return None, "token expired"
        issued = int(claims.get("ins", 0))
        cutoff = max(
            self._revoked_before.get(str(claims["sub"]), -1), self._revoked_before.get("*", -1)
        )
        if claims.get("jti") in self._revoked_ids or issued <= cutoff:
            return None, "token revoked"
        return claims, ""

    def revoke_token(self, token: str) -> bool:
        try:
            claims = jwt.decode(
                token, self.secret, algorithms=["HS256"], options={"verify_exp": False}
            )
        except jwt.InvalidTokenError:
            return False
        self._revoked_ids.add(str(claims.get("jti")))
        return True

    def revoke_issued_until_now(self, username: str) -> None:
        self._revoked_before[username] = time.time_ns()


class DemoSite:
    """The application object; ``app`` is the ASGI callable."""

    def __init__(self, config: SiteConfig) -> None:
        self.config = config
        self.catalogue = Catalogue(config.books, config.seed)
        self.limiter = RateLimiter(config.rate_limit, config.rate_window, config.ban_seconds)
        self.clock = SiteClock()
        self.tokens = Tokens(config.jwt_secret, config.token_ttl, self.clock)
        self.requests_total = 0
        self.book_requests: dict[str, int] = {}  # client address -> catalogue API requests
        routes = [
            Route("/health", self.health),
            Route("/ip", self.guarded(self.ip, auth=False, count=False)),
            Route("/api/login", self.guarded(self.login, auth=False), methods=["POST"]),
            Route("/api/book/", self.guarded(self.book_list)),
            Route("/api/book/{book_id}/", self.guarded(self.book_detail)),
            Route("/api/admin/revoke", self.revoke, methods=["POST"]),
            Route("/api/admin/stats", self.admin_stats, methods=["GET", "DELETE"]),
            Route("/api/admin/config", self.admin_config, methods=["GET", "POST"]),
            Route("/api/admin/clock", self.admin_clock, methods=["GET", "POST"]),
            Route("/pages/", linkgraph.index),
            Route("/pages/{name}", linkgraph.page),
        ]
        self.app = Starlette(routes=routes)
        install_guard(self.app, GuardPolicy(error=_error, max_body=MAX_BODY))

    @staticmethod
    def client_address(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    def guarded(self, handler: Handler, *, auth: bool = True, count: bool = True) -> Handler:
        """Wrap ``handler`` with the ban check, the rate counter, the token check and latency."""

        async def endpoint(request: Request) -> Response:
            self.requests_total += 1
            address = self.client_address(request)
            now = self.clock.monotonic()
            if self.config.latency_ms:
                await asyncio.sleep(self.config.latency_ms / 1000)
            left = self.limiter.banned_for(address, now)
            if left:
                return self._ban_response(left)
            if count and self.limiter.hit(address, now):
                log.info("event=ban address=%s seconds=%s", address, self.config.ban_seconds)
                return self._ban_response(self.config.ban_seconds)
            if auth:
                scheme, _, token = request.headers.get("authorization", "").partition(" ")
                if scheme.lower() != "jwt" or not token.strip():
                    return _error(401, "authorization required: 'Authorization: jwt <token>'")
                claims, reason = self.tokens.check(token.strip())
                if claims is None:
                    return _error(401, reason)
            return await handler(request)

        return endpoint

    def _ban_response(self, seconds: float) -> Response:
        if self.config.ban_status == 200:
            # a soft ban: an ordinary-looking page, no status and no Retry-After to go by
            page = f"<html><body><h1>{BAN_PAGE_MARKER}</h1></body></html>"
            return Response(page, media_type="text/html")
        return _error(
            self.config.ban_status,
            "address banned for sending too many requests",
            {"Retry-After": str(max(1, round(seconds)))},
        )

    async def health(self, request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "books": len(self.catalogue),
                "page_size": self.config.page_size,
                "accounts": len(self.config.accounts),
                "pid": os.getpid(),
            }
        )

    async def ip(self, request: Request) -> Response:
        return JSONResponse({"origin": self.client_address(request)})

    async def login(self, request: Request) -> Response:
        try:
            body = parse_json(await request.body())
        except ValueError:
            return _error(400, 'body must be JSON: {"username": ..., "password": ...}')
        if not isinstance(body, dict):
            return _error(400, "body must be a JSON object with username and password")
        username, password = body.get("username"), body.get("password")
        if not isinstance(username, str) or not isinstance(password, str):
            return _error(400, "username and password must be strings")
        expected = self.config.accounts.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return _error(401, "invalid username or password")
        return JSONResponse({"token": self.tokens.issue(username)})

    def _count_client(self, request: Request) -> None:
        address = self.client_address(request)
        self.book_requests[address] = self.book_requests.get(address, 0) + 1

    async def book_list(self, request: Request) -> Response:
        self._count_client(request)
        try:
            limit = int(request.query_params.get("limit", self.config.page_size))
            offset = int(request.query_params.get("offset", 0))
        except ValueError:
            return _error(400, "limit and offset must be integers")
        if not 1 <= limit <= self.config.max_limit or offset < 0:
            return _error(400, f"limit must be 1..{self.config.max_limit} and offset >= 0")
        return JSONResponse(
            {"count": len(self.catalogue), "results": self.catalogue.page(offset, limit)}
        )

    async def book_detail(self, request: Request) -> Response:
        self._count_client(request)
        book_id = request.path_params["book_id"]
        if book_id not in self.catalogue:
            return _error(404, "no such book")
        return JSONResponse(self.catalogue.book(book_id))

    def _admin_ok(self, request: Request) -> bool:
        secret = self.config.admin_secret
        given = request.headers.get("x-admin-secret", "")
        return bool(secret) and hmac.compare_digest(secret.encode(), given.encode())

    async def revoke(self, request: Request) -> Response:
        """Revoke ``{"token": t}``, ``{"username": u}`` (u's tokens so far) or ``{"all": true}``."""
        if denied := self._admin_denied(request):
            return denied
        body = await _json_object(request) or {}
        if isinstance(body.get("token"), str):
            if not self.tokens.revoke_token(body["token"]):
                return _error(400, "not a token of this site")
            return JSONResponse({"revoked": "token"})
        if isinstance(body.get("username"), str):
            self.tokens.revoke_issued_until_now(body["username"])
            return JSONResponse({"revoked": f"user:{body['username']}"})
        if body.get("all") is True:
            self.tokens.revoke_issued_until_now("*")
            return JSONResponse({"revoked": "all"})
        return _error(400, 'body must be {"token": ...}, {"username": ...} or {"all": true}')

    def _admin_denied(self, request: Request) -> Response | None:
        if not self.config.admin_secret:
            return _error(404, "admin API disabled (no --admin-secret)")
        if not self._admin_ok(request):
            return _error(403, "wrong X-Admin-Secret")
        return None

    async def admin_stats(self, request: Request) -> Response:
        """GET: counters and current bans; DELETE: forget them (bans included)."""
        if denied := self._admin_denied(request):
            return denied
        if request.method == "DELETE":
            self.requests_total = 0
            self.book_requests = {}
            self.limiter = RateLimiter(
                self.config.rate_limit, self.config.rate_window, self.config.ban_seconds
            )
        now = self.clock.monotonic()
        return JSONResponse(
            {
                "requests": self.requests_total,
                "bans": self.limiter.bans_total,
                "banned": self.limiter.banned_addresses(now),
                "book_requests": self.book_requests,
            }
        )

    async def admin_config(self, request: Request) -> Response:
        """GET: the tunable settings; POST: change some of them while the site runs."""
        if denied := self._admin_denied(request):
            return denied
        if request.method == "POST":
            body = await _json_object(request)
            if not body or set(body) - set(TUNABLE):
                return _error(400, f"body must be a JSON object with some of {', '.join(TUNABLE)}")
            for name, value in body.items():
                kind = int if name in ("rate_limit", "ban_status") else (int, float)
                if isinstance(value, bool) or not isinstance(value, kind):
                    return _error(400, f"{name} must be a number, got {str(value)[:50]!r}")
                if kind is not int and not _finite(value):
                    return _error(400, f"{name} must be a finite number, got {str(value)[:50]}")
            latency = body.get("latency_ms", 0)
            if not 0 <= latency <= MAX_LATENCY_MS:
                return _error(400, f"latency_ms must be 0..{MAX_LATENCY_MS}, got {latency!r}")
            try:
                self.config = replace(self.config, **body)
            except ConfigError as exc:
                return _error(400, str(exc))
            self.limiter.limit = self.config.rate_limit
            self.limiter.window = self.config.rate_window
            self.limiter.ban_seconds = self.config.ban_seconds
        return JSONResponse({name: getattr(self.config, name) for name in TUNABLE})

    async def admin_clock(self, request: Request) -> Response:
        """GET: the site clock's offset; POST ``{"advance_seconds": N}``: move its time forward."""
        if denied := self._admin_denied(request):
            return denied
        if request.method == "POST":
            body = await _json_object(request)
            step = body.get("advance_seconds") if body else None
            if (
                body is None
                or set(body) != {"advance_seconds"}
                or isinstance(step, bool)
                or not isinstance(step, int | float)
                or not _finite(step)
                or not 0 < step <= MAX_CLOCK_STEP
            ):
                return _error(
                    400, f'body must be {{"advance_seconds": N}} with 0 < N <= {MAX_CLOCK_STEP}'
                )
            self.clock.advance(float(step))
        return JSONResponse({"offset_seconds": self.clock.offset})


def create_app(config: SiteConfig) -> Starlette:
    return DemoSite(config).app


def app_from_env() -> Starlette:
    """uvicorn factory for worker processes: the parent passes its config in the environment."""
    return create_app(SiteConfig.from_json(os.environ[CONFIG_ENV]))
