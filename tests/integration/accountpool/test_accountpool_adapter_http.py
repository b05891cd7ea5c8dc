"""The configurable adapter against a second, differently built site on loopback: form login
with a session cookie, a token nested in JSON with ``expires_in``, and the answers that are not
a credential (throttling, missing token, not JSON)."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from support.net import free_port
from support.waiting import wait_until

from crawlfleet.accountpool.adapters import (
    CheckResult,
    LoginError,
    LoginRejected,
    SiteUnavailable,
    build_adapter,
)
from crawlfleet.accountpool.sites import SiteSpec

USERS = {"olga": "pw-olga-form-7"}


class SessionSite:
    """A site in the style of classic web apps: form login, session cookie, opaque tokens."""

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.app = Starlette(
            routes=[
                Route("/session", self.login, methods=["POST"]),
                Route("/me", self.me),
                Route("/api/auth", self.api_auth, methods=["POST"]),
                Route("/api/busy", self.busy, methods=["POST"]),
                Route("/api/empty", self.empty, methods=["POST"]),
                Route("/api/html", self.html, methods=["POST"]),
            ]
        )

    async def login(self, request: Request) -> Response:
        # Parsed by hand: starlette's request.form() needs python-multipart.
        form = dict(parse_qsl((await request.body()).decode()))
        if USERS.get(form.get("user", "")) != form.get("pass"):
            return PlainTextResponse("forbidden", status_code=403)
        sid = secrets.token_hex(8)
        self.sessions.add(sid)
        response = Response(status_code=204)
        response.set_cookie("sid", sid)
        return response

    async def me(self, request: Request) -> Response:
        ok = request.cookies.get("sid") in self.sessions
        return JSONResponse({"ok": ok}, status_code=200 if ok else 401)

    async def api_auth(self, request: Request) -> Response:
        body = await request.json()
        if USERS.get(body.get("login")) != body.get("secret"):
            return JSONResponse({"error": "no"}, status_code=401)
        return JSONResponse({"data": {"auth": {"token": "opaque-1", "expires_in": 42}}})

    async def busy(self, request: Request) -> Response:
        return JSONResponse({"error": "slow down"}, status_code=429)

    async def empty(self, request: Request) -> Response:
        return JSONResponse({"data": {}})

    async def html(self, request: Request) -> Response:
        return PlainTextResponse("<html>welcome</html>")


@pytest.fixture(scope="module")
def session_site() -> Iterator[tuple[SessionSite, str]]:
    site = SessionSite()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(site.app, host="127.0.0.1", port=port, log_config=None, lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "uvicorn to start", timeout=10, interval=0.02)
    yield site, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def adapter(url: str, **options: Any) -> Any:
    return build_adapter(SiteSpec("other", "json", url, options))


def test_form_login_with_session_cookie(session_site: tuple[SessionSite, str]) -> None:
    site, url = session_site
    cookie = adapter(
        url,
        login={
            "url": "/session",
            "body_format": "form",
            "body": {"user": "{username}", "pass": "{password}"},
            "token_cookie": "sid",
            "rejected_status": [403],
        },
        header={"name": "Cookie", "format": "sid={token}"},
        check={"url": "/me"},
        token_ttl=120,
    )

    async def main() -> None:
        async with httpx.AsyncClient() as client:
            credential = await cookie.login(client, "olga", USERS["olga"])
            assert credential.token in site.sessions
            assert abs(credential.expires_at - (time.time() + 120)) < 5
            assert await cookie.check(client, credential.token) is CheckResult.VALID
            site.sessions.clear()
            assert await cookie.check(client, credential.token) is CheckResult.REJECTED
            with pytest.raises(LoginRejected, match="HTTP 403"):
                await cookie.login(client, "olga", "wrong")

    asyncio.run(main())


def test_nested_token_with_expires_in_and_unusable_answers(
    session_site: tuple[SessionSite, str],
) -> None:
    _, url = session_site
    options: dict[str, Any] = {
        "login": {
            "url": "/api/auth",
            "body": {"login": "{username}", "secret": "{password}"},
            "token_path": "data.auth.token",
            "expires_in_path": "data.auth.expires_in",
        },
        "check": {"url": "/me"},
    }

    def variant(path: str) -> Any:
        return adapter(url, **{**options, "login": {**options["login"], "url": path}})

    async def main() -> None:
        async with httpx.AsyncClient() as client:
            credential = await adapter(url, **options).login(client, "olga", USERS["olga"])
            assert credential.token == "opaque-1"
            assert abs(credential.expires_at - (time.time() + 42)) < 5
            with pytest.raises(LoginRejected):
                await adapter(url, **options).login(client, "olga", "nope")
            with pytest.raises(SiteUnavailable, match="HTTP 429"):
                await variant("/api/busy").login(client, "olga", USERS["olga"])
            with pytest.raises(LoginError, match=r"no token at JSON path 'data\.auth\.token'"):
                await variant("/api/empty").login(client, "olga", USERS["olga"])
            with pytest.raises(LoginError, match="not JSON"):
                await variant("/api/html").login(client, "olga", USERS["olga"])
            with pytest.raises(SiteUnavailable, match="ConnectError"):
                await adapter("http://127.0.0.1:1", **options).login(client, "olga", "x")

    asyncio.run(main())
