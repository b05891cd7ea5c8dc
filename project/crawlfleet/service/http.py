"""What stands between the network and every hub service's Starlette app.

``RequestGuard`` is one ASGI middleware, installed by ``install_guard``; it answers before the
app sees a request, with the service's own error shape and one line, and closes the
connection after each of its refusals:

- **Host names** (against DNS rebinding, where a web page's own name comes to point at
  127.0.0.1): the ``Host`` header must be ``localhost``, ``127.0.0.1``, ``[::1]`` or the
  address the connection arrived on (the bound address; any port) — else **421**. A service
  that requires an API key and is reached on a non-loopback address accepts any name: a
  rebinding page cannot send the key, and the hosts reaching it (the lab's crawlers, by the
  hub's private address) need no list. A request without ``Host`` (HTTP/1.0) passes.
- **Cross-site writes** (any method but GET, HEAD and OPTIONS): refused with **403** when
  ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site``, when ``Origin`` is ``null`` or names
  another origin than ``Host``, and, for a service running without its API key (loopback),
  when a POST without the key header has a content type a page can send cross-site without a
  preflight
  (``application/x-www-form-urlencoded``, ``multipart/form-data``, ``text/plain``, or a
  body without one).
  Programs (curl, httpx, the workers) send neither ``Origin`` nor ``Sec-Fetch-Site``, and
  send JSON or the key, so they are not affected. The demo site has no key: for it the
  ``Origin`` and ``Sec-Fetch-Site`` rules apply (``curl -d`` keeps working).
- **Bodies**: counted while they arrive: a declared ``Content-Length`` past ``max_body`` is
  **413** at once, a body (chunked or not) that grows past it is **413** while it is read,
  and one that is not complete ``BODY_TIMEOUT`` seconds after the handler began reading is
  **408**; all close the connection. An answer sent before the whole body was read (a wrong
  API key, a refused request) closes the connection too, so no request costs more memory or
  time than that. Handlers read the body before they start their Redis deadline.
- **Shutdown**: a request still running when uvicorn's graceful-shutdown timeout cancels it
  answers 503 instead of logging a traceback.

``server_options()`` are the uvicorn settings every service runs with: the request head must
arrive within ``HEADER_TIMEOUT`` seconds (``BoundedH11Protocol``; uvicorn has no such limit)
and within ``MAX_HEADER_BYTES``, idle keep-alive connections close after
``KEEP_ALIVE_TIMEOUT``, in-flight requests get ``GRACEFUL_SHUTDOWN`` seconds at a stop.

``parse_json`` reads a body as JSON or raises ``BadJson`` (a ``ValueError``) with one line:
not UTF-8, not JSON, ``NaN``/``Infinity``, or nested deeper than Python can parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 5.0
BODY_TIMEOUT = 10.0
KEEP_ALIVE_TIMEOUT = 5
GRACEFUL_SHUTDOWN = 3
MAX_HEADER_BYTES = 16 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
API_KEY_HEADER = "X-API-Key"  # the hub services' key header (the pools, the dashboard)

ErrorResponse = Callable[[int, str], Response]


def json_error(status: int, message: str) -> Response:
    """The hub services' error body, ``{"error": message}`` (the guard's refusals use it too)."""
    return JSONResponse({"error": message}, status)


class BadJson(ValueError):
    """A body that is not the JSON it should be; the message is one line."""


def _no_constant(name: str) -> Any:
    raise BadJson(f"body is not valid JSON ({name} is not a number)")


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``; ``BadJson`` for anything else, never another exception."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadJson("body is not UTF-8") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BadJson("body is not valid JSON: nested too deeply") from None
    except BadJson:
        raise
    except ValueError as exc:  # JSONDecodeError, and integers too long to convert
        raise BadJson(f"body is not valid JSON: {str(exc).splitlines()[0]}") from None


@dataclass(frozen=True)
class GuardPolicy:
    """One service's limits; ``error`` renders a refusal in the service's own shape."""

    error: ErrorResponse
    max_body: int
    # Header carrying the service's API key (None: the service has none, e.g. the demo site).
    key_header: str | None = None
    api_key_required: bool = False
    body_timeout: float = BODY_TIMEOUT

    @classmethod
    def keyed(cls, error: ErrorResponse, max_body: int, *, required: bool) -> GuardPolicy:
        """A hub service's policy: its API key comes in ``X-API-Key`` (``API_KEY_HEADER``)."""
        return cls(error, max_body, key_header=API_KEY_HEADER, api_key_required=required)


def _host_name(value: str) -> str:
    """The name part of a ``Host`` header: no port, no brackets, lower case, no final dot."""
    if value.startswith("["):
        name = value[1:].partition("]")[0]
    else:
        name, _, port = value.rpartition(":")
        if not name or not port.isdigit():
            name = value
    return name.lower().rstrip(".")


def _has_body(headers: dict[str, str]) -> bool:
    return headers.get("content-length", "") not in ("", "0") or "transfer-encoding" in headers


def _is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address == "localhost"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def _origin_netloc(origin: str) -> str | None:
    """``host[:port]`` of an ``Origin`` value without its default port (None if malformed)."""
    scheme, sep, rest = origin.partition("://")
    if not sep or not rest or "/" in rest:
        return None
    default = {"http": ":80", "https": ":443"}.get(scheme.lower(), "")
    rest = rest.lower()
    return rest[: -len(default)] if default and rest.endswith(default) else rest


def _strip_default_port(host: str, scheme: str) -> str:
    default = ":443" if scheme == "https" else ":80"
    host = host.lower()
    return host[: -len(default)] if host.endswith(default) else host


class RequestGuard:
    """ASGI middleware applying a ``GuardPolicy`` (see the module docstring for the rules)."""

    def __init__(self, app: ASGIApp, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    def host_problem(self, scope: Scope, headers: dict[str, str]) -> str | None:
        raw = headers.get("host")
        if raw is None:
            return None
        server = scope.get("server")
        local = str(server[0]).lower() if server else "127.0.0.1"
        if self.policy.api_key_required and not _is_loopback(local):
            return None
        name = _host_name(raw)
        if name in LOOPBACK_NAMES or name == local.strip("[]"):
            return None
        return f"unknown Host {raw!r}: use localhost, 127.0.0.1, [::1] or this server's address"

    def write_problem(self, scope: Scope, headers: dict[str, str]) -> str | None:
        if scope["method"] in SAFE_METHODS:
            return None
        fetch_site = headers.get("sec-fetch-site", "").lower()
        if fetch_site in ("cross-site", "same-site"):
            return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
        origin = headers.get("origin")
        if origin is not None:
            host = _strip_default_port(headers.get("host", ""), scope.get("scheme", "http"))
            if _origin_netloc(origin) != host:
                return f"cross-origin request refused (Origin: {origin[:100]})"
        key = self.policy.key_header
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if (
            key is None
            or self.policy.api_key_required  # the service answers 401 without its key
            or key.lower() in headers
            or scope["method"] != "POST"
        ):
            return None
        if kind in FORM_TYPES or (not kind and _has_body(headers)):
            shown = kind or "a body and no Content-Type"
            return f"a POST with {shown} needs the {key} header (cross-site forms are refused)"
        return None

    async def refuse(
        self, scope: Scope, send: Send, status: int, message: str, close: bool = False
    ) -> None:
        response = self.policy.error(status, message)
        if close:
            response.headers["connection"] = "close"
        await response(scope, _no_receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if (problem := self.host_problem(scope, headers)) is not None:
            await self.refuse(scope, send, 421, problem, close=True)
            return
        if (problem := self.write_problem(scope, headers)) is not None:
            await self.refuse(scope, send, 403, problem, close=True)
            return
        limit = self.policy.max_body
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self.refuse(scope, send, 413, f"body larger than {limit} bytes", close=True)
            return
        body = _BoundedBody(receive, limit, self.policy.body_timeout, _has_body(headers))
        await self._run(scope, body, send)

    async def _run(self, scope: Scope, body: _BoundedBody, send: Send) -> None:
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not body.complete:
                # Answered without the whole body (refused, or never read): close afterwards,
                # or the rest would keep the connection busy with no timer running.
                message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
            started = True
            await send(message)

        try:
            await self.app(scope, body.receive, tracking_send)
        except _BodyRefused as refusal:
            if not started:
                await self.refuse(scope, send, refusal.status, str(refusal), close=True)
        except asyncio.CancelledError:
            # uvicorn cancels what is still running when its graceful shutdown times out.
            if not started:
                with contextlib.suppress(Exception):
                    await self.refuse(scope, send, 503, "service is shutting down", close=True)


_CLOSE = (b"connection", b"close")


class _BodyRefused(Exception):
    """Raised from ``receive`` to end the request with ``status`` and this one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _BoundedBody:
    """The connection's ``receive``, counting body bytes against ``limit`` and a deadline.

    The deadline starts with the first read, so a handler that refuses a request before
    reading its body (a wrong API key) costs no more than uvicorn's own read buffer.
    """

    def __init__(self, receive: Receive, limit: int, timeout: float, has_body: bool) -> None:
        self._receive = receive
        self.limit = limit
        self.timeout = timeout
        self.size = 0
        self.complete = not has_body
        self._deadline: float | None = None

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()
        if self._deadline is None:
            self._deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            raise _BodyRefused(
                408, f"request body not received within {self.timeout:g} s"
            ) from None
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.limit:
                raise _BodyRefused(413, f"body larger than {self.limit} bytes")
            self.complete = not message.get("more_body", False)
        return message


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def install_guard(app: Starlette, policy: GuardPolicy) -> None:
    """Put the request guard in front of ``app`` (outside its routing and its own middleware)."""
    app.add_middleware(RequestGuard, policy=policy)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head.

    A connection that has not sent a complete request head ``HEADER_TIMEOUT`` seconds after it
    opened, or after the first byte of its next request, is closed. uvicorn's own keep-alive
    timer covers a connection idle between requests.
    """

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _watch_head(self) -> None:
        """Time the head while one is awaited and has begun (or the connection is new)."""
        awaiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if not awaiting or self.timeout_keep_alive_task is not None:
            self._stop_head_timer()
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(HEADER_TIMEOUT, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def server_options() -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config``/``uvicorn.run`` shared by every service."""
    return {
        "http": BoundedH11Protocol,
        "timeout_keep_alive": KEEP_ALIVE_TIMEOUT,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN,
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }
