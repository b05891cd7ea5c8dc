"""How every hub service runs: its socket, its stop signals, its loops and its exit status.

- ``bind(host, port, names)``: the listening socket, bound before anything else starts. A name
  that does not resolve is bad configuration (``ConfigError``, exit 2); a port that is taken
  is a runtime failure (``ServiceFailure``, exit 1).
- ``on_stop_signals(stop, log)``: SIGTERM and SIGINT set ``stop`` (and log ``stopping`` with the
  signal's name) instead of killing the process, so a service finishes what it was doing.
- ``serve(app, sock, stop, loops=...)``: uvicorn on ``sock`` with the service's background
  loops, until ``stop`` is set: then uvicorn answers the requests in flight (at most
  ``GRACEFUL_SHUTDOWN`` seconds), the loops are cancelled, and ``EXIT_OK`` is returned —
  ``EXIT_FAILURE`` if the HTTP server ended on its own.
- ``every(interval, cycle, stop, wake=...)``: a periodic loop; a cycle still running when
  ``stop`` is set is cancelled (a cycle's own errors are the cycle's to log).
- ``check_redis(client, url, required=..., log=...)``: the start-up ping. A password Redis
  refuses is bad configuration; an unreachable Redis is a runtime failure when the command
  needs it (a one-shot run), else a warning: the service answers 503 until Redis is back.
- ``run(prog, work)``: runs a command and turns ``ConfigError``/``ServiceFailure`` into their
  exit statuses (``crawlfleet.service.options``) with one line on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, Literal, TypeVar

import redis.asyncio as aioredis
import uvicorn
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from starlette.types import ASGIApp

from crawlfleet.hub.urls import has_credentials, mask_url
from crawlfleet.service.http import GRACEFUL_SHUTDOWN, server_options
from crawlfleet.service.logs import event
from crawlfleet.service.options import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    ConfigError,
    ServiceFailure,
)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
BACKLOG = 2048
T = TypeVar("T")


def bind(host: str, port: int, names: str = "--host") -> socket.socket:
    """A listening TCP socket on ``host:port`` (``names``: how errors name the host setting)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(f"{names} {host!r}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ServiceFailure(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def on_stop_signals(stop: asyncio.Event, log: logging.Logger) -> None:
    """SIGTERM and SIGINT set ``stop`` (the first one logs ``stopping``)."""

    def stopping(sig: signal.Signals) -> None:
        if not stop.is_set():
            event(log, "stopping", signal=sig.name)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stopping, sig)


async def until_stopped(work: Awaitable[T], stop: asyncio.Event) -> tuple[bool, T | None]:
    """(True, result) when ``work`` ends first; (False, None) when ``stop`` came first (then
    ``work`` is cancelled and awaited). ``work``'s own exceptions propagate."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False, None
    return True, task.result()


async def every(
    interval: float,
    cycle: Callable[[], Awaitable[object]],
    stop: asyncio.Event,
    *,
    wake: asyncio.Event | None = None,
) -> None:
    """Run ``cycle`` every ``interval`` seconds, sooner when ``wake`` is set, until ``stop``."""
    while not stop.is_set():
        if wake is not None:
            wake.clear()
        finished, _ = await until_stopped(cycle(), stop)
        if not finished:
            return
        waits = [stop.wait()] if wake is None else [stop.wait(), wake.wait()]
        pending = {asyncio.ensure_future(w) for w in waits}
        _, pending = await asyncio.wait(
            pending, timeout=interval, return_when=asyncio.FIRST_COMPLETED
        )
        for waiter in pending:
            waiter.cancel()


def uvicorn_config(app: ASGIApp | str, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for a hub service: no logging config of its own (``service.logs``),
    no ``Server`` header, the client address is the TCP peer (no ``X-Forwarded-For``), and
    the limits of ``service.http``; ``options`` adds to or overrides them."""
    settings: dict[str, Any] = {
        "log_config": None,
        "access_log": False,
        "server_header": False,
        "proxy_headers": False,
        **server_options(),
    }
    return uvicorn.Config(app, **{**settings, **options})


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: ``on_stop_signals`` owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    app: ASGIApp,
    sock: socket.socket,
    stop: asyncio.Event,
    *,
    loops: Sequence[Coroutine[Any, Any, object]] = (),
    lifespan: Literal["on", "off"] = "off",
    access_log: bool = False,
    log: logging.Logger | None = None,
    tls_cert: str = "",
    tls_key: str = "",
) -> int:
    """Serve ``app`` on ``sock`` with ``loops`` until ``stop``; ``EXIT_OK`` or ``EXIT_FAILURE``.

    HTTPS when ``tls_cert`` and ``tls_key`` name a certificate and its key (``options.check_tls``
    has checked them), plain HTTP when both are empty.
    """
    tls = {"ssl_certfile": tls_cert, "ssl_keyfile": tls_key} if tls_cert else {}
    server = _Server(uvicorn_config(app, lifespan=lifespan, access_log=access_log, **tls))
    http = asyncio.create_task(server.serve(sockets=[sock]))
    tasks = [asyncio.ensure_future(loop) for loop in loops]
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({http, stopping}, return_when=asyncio.FIRST_COMPLETED)
        failed = http.done()  # the HTTP server ended without being asked to
        stop.set()
        server.should_exit = True
        try:
            await http
        except Exception as exc:
            if log is not None:
                event(log, "http_failed", logging.ERROR, error=f"{type(exc).__name__}: {exc}")
            failed = True
    finally:
        stop.set()  # the loops end at once (a cycle in progress is cancelled)
        stopping.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=GRACEFUL_SHUTDOWN)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        sock.close()
    return EXIT_FAILURE if failed else EXIT_OK


async def check_redis(
    client: aioredis.Redis, url: str, *, required: bool, log: logging.Logger
) -> bool:
    """Ping Redis at start: True if it answered, False if it is down and not ``required``."""
    where = mask_url(url)
    try:
        await client.ping()
    except (AuthenticationError, ResponseError) as exc:
        if isinstance(exc, ResponseError) and not ("NOAUTH" in str(exc) or "WRONGPASS" in str(exc)):
            raise
        if not has_credentials(url):
            raise ConfigError(
                f"Redis at {where} needs a valid password (REDIS_URL has none)"
            ) from None
        raise ConfigError(f"Redis at {where} rejected the password (REDIS_URL)") from None
    except (RedisError, OSError) as exc:
        if required:
            raise ServiceFailure(f"cannot reach Redis at {where} (REDIS_URL): {exc}") from None
        event(
            log,
            "redis_unreachable",
            logging.WARNING,
            redis=where,
            error=str(exc),
            note="serving 503 until it answers",
        )
        return False
    return True


def fail(prog: str, exc: Exception) -> int:
    """Print ``exc`` as the one line of ``prog`` and return its exit status."""
    print(
        f"{prog}: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
        file=sys.stderr,
    )
    return EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILURE


def run(prog: str, work: Callable[[], int]) -> int:
    """``work()``'s status; ``ConfigError`` is 2 and ``ServiceFailure`` 1, with one line."""
    try:
        return work()
    except (ConfigError, ServiceFailure) as exc:
        return fail(prog, exc)
