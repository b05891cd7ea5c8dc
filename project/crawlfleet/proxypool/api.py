"""The proxy pool's HTTP API (Starlette): /random, /all, /count, /report, /health, /metrics.

Proxy answers are ``text/plain``, one proxy per line, ``host:port`` for a plain HTTP proxy
without credentials and the full URL otherwise (``?format=url`` always gives the URL).
``/report`` and ``/health`` speak JSON. Every endpoint but ``/health`` and ``/metrics`` wants the
API key in ``X-API-Key`` when one is configured. A Redis failure (down, frozen past the deadline
of ``crawlfleet.service.redisfail``, a key of the wrong type) is a 503 naming the cause. The
shared request guard (``crawlfleet.service.http``) checks Host, cross-site writes and bodies
first; its refusals are JSON ``{"error": ...}``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import redis.exceptions
from prometheus_client import (
    CollectorRegistry,
    Counter,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crawlfleet.hub.urls import mask_url, redis_location
from crawlfleet.proxypool.config import Settings
from crawlfleet.proxypool.proxies import ProxyFormatError, parse_proxy, render_proxy
from crawlfleet.proxypool.store import ProxyStore
from crawlfleet.service.http import GuardPolicy, install_guard, json_error, parse_json
from crawlfleet.service.redisfail import RedisFailure, RedisGuard

REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
FORMATS = ("auto", "url")
REPORT_REASONS = ("failed", "banned")
MAX_REPORT_BODY = 4096
ENDPOINTS = ("/random", "/all", "/count", "/report", "/health", "/metrics")
# Shared counters written by the fetch and test loops, whichever process runs them.
STAT_COUNTERS = {
    "tests_passed": ("proxypool_tests", "result", "passed"),
    "tests_failed": ("proxypool_tests", "result", "failed"),
    "fetch_added": ("proxypool_fetched_proxies", "result", "added"),
    "fetch_invalid": ("proxypool_fetched_proxies", "result", "invalid"),
    "fetch_refused_full": ("proxypool_fetched_proxies", "result", "refused_full"),
    "fetch_errors": ("proxypool_source_errors", None, None),
    "proxies_removed": ("proxypool_removed_proxies", None, None),
}
_HELP = {
    "proxypool_tests": "Proxy tests by result, all tester processes",
    "proxypool_fetched_proxies": "Proxy lines from sources by outcome",
    "proxypool_source_errors": "Source fetches that failed",
    "proxypool_removed_proxies": "Proxies removed after reaching score 0 in tests",
}


class PoolCollector(Collector):
    """Pool and loop figures read from Redis by the /metrics handler just before rendering."""

    def __init__(self) -> None:
        self.bands: dict[str, int] = {}
        self.stats: dict[str, int] = {}
        self.redis_up = False

    def collect(self) -> list[Metric]:
        up = GaugeMetricFamily("proxypool_redis_up", "1 if Redis answered the last scrape")
        up.add_metric([], 1.0 if self.redis_up else 0.0)
        metrics: list[Metric] = [up]
        if not self.redis_up:
            return metrics
        pool = GaugeMetricFamily(
            "proxypool_proxies", "Proxies in the pool by score band", labels=["band"]
        )
        for band, count in self.bands.items():
            pool.add_metric([band], count)
        metrics.append(pool)
        families: dict[str, CounterMetricFamily] = {}
        for stat, (name, label, value) in STAT_COUNTERS.items():
            if name not in families:
                families[name] = CounterMetricFamily(
                    name, _HELP[name], labels=[label] if label else None
                )
            families[name].add_metric([value] if value else [], self.stats.get(stat, 0))
        return [*metrics, *families.values()]


class _RequestCounter:
    """ASGI middleware: count every answer by endpoint and status (unknown paths share a label)."""

    def __init__(self, app: ASGIApp, counter: Counter) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.counter.labels(endpoint, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)


def _text(body: str, status: int = 200) -> PlainTextResponse:
    return PlainTextResponse(body, status_code=status)


class ProxyApi:
    """The proxy pool's HTTP API over one store: the handlers, the API key check, its metrics."""

    def __init__(self, settings: Settings, store: ProxyStore) -> None:
        disable_created_metrics()  # *_created series double the output and nobody graphs them
        self.settings = settings
        self.store = store
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "proxypool_api_requests",
            "API requests by endpoint and status",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.pool = PoolCollector()
        self.registry.register(self.pool)
        self.api_key = (settings.api_key or "").encode()
        self.where = mask_url(settings.redis_url)
        self.redis_guard = RedisGuard(
            store.client,
            self.where,
            expected_types=lambda: {store.key: "zset", store.stats_key: "hash"},
        )

    def guarded(
        self,
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def check(request: Request) -> Response:
            if self.api_key:
                sent = request.headers.get("x-api-key")
                if sent is None:
                    return _text("missing X-API-Key header", 401)
                if not hmac.compare_digest(sent.encode(), self.api_key):
                    return _text("invalid API key", 401)
            await request.body()  # read (and bounded) before the Redis deadline starts
            try:
                return await self.redis_guard.run(lambda: handler(request))
            except RedisFailure as exc:
                return _text(str(exc), 503)

        return check

    def fmt_of(self, request: Request, allowed: tuple[str, ...] = FORMATS) -> str:
        fmt = request.query_params.get("format", "auto")
        if fmt not in allowed:
            raise ValueError(f"format must be one of {', '.join(allowed)}")
        return fmt

    async def random(self, request: Request) -> Response:
        try:
            fmt = self.fmt_of(request)
            count = _count(request.query_params.get("count", "1"), self.settings.max_count)
        except ValueError as exc:
            return _text(str(exc), 400)
        proxies = await self.store.random(count)
        if not proxies:
            return _text("proxy pool is empty: no proxy has been fetched yet, or none passed", 503)
        return _text("\n".join(render_proxy(p, fmt) for p in proxies))

    async def all_proxies(self, request: Request) -> Response:
        try:
            fmt = self.fmt_of(request, (*FORMATS, "json"))
        except ValueError as exc:
            return _text(str(exc), 400)
        proxies = await self.store.all()
        if fmt == "json":
            return JSONResponse([{"proxy": p, "score": int(s)} for p, s in proxies])
        return _text("\n".join(render_proxy(p, fmt) for p, _ in proxies))

    async def count(self, request: Request) -> Response:
        return _text(str(await self.store.count()))

    async def report(self, request: Request) -> Response:
        try:
            fields = await _report_fields(request)
            proxy = parse_proxy(str(fields.get("proxy", "")))
            reason = str(fields.get("reason", "failed"))
            if reason not in REPORT_REASONS:
                raise ValueError(f"reason must be one of {', '.join(REPORT_REASONS)}")
        except ProxyFormatError as exc:
            return JSONResponse({"error": f"bad proxy: {exc}"}, 400)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, 400)
        try:
            if reason == "banned":
                score = 0 if await self.redis_guard.run(lambda: self.store.remove(proxy)) else None
            else:
                score = await self.redis_guard.run(
                    lambda: self.store.decrease(proxy, self.settings.report_step)
                )
        except RedisFailure as exc:
            return JSONResponse({"error": str(exc)}, 503)
        if score is None:
            return JSONResponse(
                {"error": "proxy is not in the pool", "proxy": render_proxy(proxy)}, 404
            )
        return JSONResponse(
            {"proxy": render_proxy(proxy), "reason": reason, "score": score, "removed": score == 0}
        )

    async def health(self, request: Request) -> Response:
        location = redis_location(self.settings.redis_url)
        try:
            size = await self.redis_guard.run(self.store.count)
            bands = await self.redis_guard.run(self.store.bands)
        except RedisFailure as exc:
            # Unauthenticated: Redis is named by host, port and database only, never the URL.
            error = str(exc).replace(self.where, location)
            return JSONResponse({"status": "error", "redis": error, "pool_size": None}, 503)
        return JSONResponse(
            {
                "status": "ok",
                "redis": "ok",
                "pool_size": size,
                "proxies_at_100": bands["100"],
                "redis_url": location,
            }
        )

    async def metrics(self, request: Request) -> Response:
        try:
            self.pool.bands = await self.redis_guard.run(self.store.bands)
            self.pool.stats = await self.redis_guard.run(self.store.stats)
            self.pool.redis_up = True
        except RedisFailure:
            self.pool.redis_up = False
        return Response(
            generate_latest(self.registry), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    def app(self) -> Starlette:
        """The ASGI app; ``app.state.registry`` holds its own Prometheus registry."""
        app = Starlette(
            routes=[
                Route("/random", self.guarded(self.random), methods=["GET"]),
                Route("/all", self.guarded(self.all_proxies), methods=["GET"]),
                Route("/count", self.guarded(self.count), methods=["GET"]),
                Route("/report", self.guarded(self.report), methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.metrics, methods=["GET"]),
            ]
        )
        install_guard(
            app,
            GuardPolicy.keyed(json_error, MAX_REPORT_BODY, required=bool(self.api_key)),
        )
        app.add_middleware(
            _RequestCounter, counter=self.requests
        )  # outermost: refusals are counted
        app.state.registry = self.registry
        return app


def create_app(settings: Settings, store: ProxyStore) -> Starlette:
    """The ASGI app; ``app.state.registry`` holds its own Prometheus registry."""
    return ProxyApi(settings, store).app()


def _count(raw: str, most: int) -> int:
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if not 1 <= count <= most:
        raise ValueError(f"count must be an integer between 1 and {most}")
    return count


async def _report_fields(request: Request) -> dict[str, Any]:
    """The report's fields from a JSON object, a form, or a bare proxy as the text body.

    The request guard has already refused a body over ``MAX_REPORT_BODY`` bytes.
    """
    body = await request.body()
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise ValueError("body is not UTF-8") from None
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        data = parse_json(body)
        if not isinstance(data, dict):
            raise ValueError('JSON body must be an object like {"proxy": "host:port"}')
        fields = dict(data)
    elif kind == "application/x-www-form-urlencoded":
        fields = {k: v[0] for k, v in parse_qs(text).items()}
    else:
        fields = {"proxy": text.strip()}
    if not fields.get("proxy"):
        raise ValueError('no proxy given: send {"proxy": "host:port"}')
    return fields
