"""The dashboard's HTTP app (Starlette): the page, its JSON API, /metrics and /health.

``GET /`` is one static page (inline CSS, vanilla JS, SVG charts: nothing loads from elsewhere)
that polls ``GET /api/status`` every ``--refresh`` seconds. ``/api/status`` is the ``crawlfleet
status --json`` document plus each spider's ``series`` (queue depth and per-worker throughput
over the last hour). Every endpoint but ``/health`` wants the API key when one is configured:
header ``X-API-Key``, or HTTP basic auth with the key as password (any user name) so that a
browser can log in. Redis is read with the synchronous client in worker threads; a snapshot is
shared by requests arriving within half a refresh period. A request whose Redis work does not
finish within ``crawlfleet.service.redisfail``'s deadline (a frozen Redis) answers 503 at once;
the shared request guard (``crawlfleet.service.http``) checks Host and cross-site writes first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from crawlfleet.alerts.webhook import Monitor
from crawlfleet.dashboard import jobs, metrics
from crawlfleet.dashboard.config import Settings
from crawlfleet.dashboard.core import (
    MAX_BODY,
    Dashboard,
    Handler,
    html_headers,
    page_html,
    refused,
)
from crawlfleet.hub.urls import redis_location
from crawlfleet.service.http import GuardPolicy, install_guard, json_error
from crawlfleet.service.redisfail import RedisFailure, RedisGuard


def _health(
    settings: Settings, dash: Dashboard, client: redis.Redis, redis_guard: RedisGuard
) -> Handler:
    """``/health``, unauthenticated: Redis is named by host, port and database only, never by
    its URL."""

    async def health(request: Request) -> Response:
        location = redis_location(settings.redis_url)
        sample_error = dash.sample_error
        body: dict[str, Any] = {
            "status": "ok",
            "redis": "ok",
            "redis_url": location,
            "last_sample": dash.last_sample,
            "sample_error": sample_error and sample_error.replace(dash.where, location),
        }
        try:
            await redis_guard.run(lambda: run_in_threadpool(client.ping))
        except RedisFailure as exc:
            error = str(exc).replace(dash.where, location)
            body.update(status="unavailable", redis=f"error: {error}")
            return JSONResponse(body, status_code=503)
        return JSONResponse(body)

    return health


def _lifespan(settings: Settings, dash: Dashboard, client: redis.Redis, sampler: bool) -> Any:
    """The dashboard's sampler and alert monitor, running while the app serves (``sampler``)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.ensure_future(dash.run_sampler()) if sampler else None
        interval, webhook = settings.sample_interval, settings.alert_webhook
        monitor = Monitor(client, settings.redis_url, dash.spiders, interval, webhook)
        alerting = asyncio.ensure_future(monitor.run()) if sampler else None
        try:
            yield
        finally:
            for running in (task, alerting):
                if running is not None:
                    running.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await running

    return lifespan


def create_app(settings: Settings, client: redis.Redis, *, sampler: bool = True) -> Starlette:
    dash = Dashboard(settings, client)
    # The sync client runs in worker threads: the deadline answers for it, the thread finishes.
    redis_guard = RedisGuard(None, dash.where)
    html = page_html(settings.refresh)
    page_headers = html_headers(html, "no-referrer")

    def guarded(handler: Handler) -> Handler:
        async def check(request: Request) -> Response:
            if (denied := refused(request, settings.api_key)) is not None:
                return denied
            try:
                return await redis_guard.run(lambda: handler(request))
            except RedisFailure as exc:
                return JSONResponse({"error": str(exc)}, status_code=503)

        return check

    async def page(request: Request) -> Response:
        return HTMLResponse(html, headers=page_headers)

    async def status(request: Request) -> Response:
        return JSONResponse(await dash.page_view(), headers={"Cache-Control": "no-store"})

    async def metrics_endpoint(request: Request) -> Response:
        try:
            view = await redis_guard.run(
                lambda: run_in_threadpool(dash.build, with_series=False, with_scrapy=True)
            )
        except RedisFailure:
            view = None
        return Response(metrics.render(view), media_type=metrics.CONTENT_TYPE)

    app = Starlette(
        routes=[
            Route("/", guarded(page)),
            Route("/api/status", guarded(status)),
            Route("/metrics", guarded(metrics_endpoint)),
            Route("/health", _health(settings, dash, client, redis_guard)),
        ],
        lifespan=_lifespan(settings, dash, client, sampler),
    )
    install_guard(
        app,
        GuardPolicy.keyed(json_error, MAX_BODY, required=bool(settings.api_key)),
    )
    app.state.dashboard = dash
    jobs.install(app, dash)
    return app
