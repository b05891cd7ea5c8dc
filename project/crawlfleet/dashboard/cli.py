"""``crawlfleet dashboard`` (also ``crawlfleet-dashboard``): serve the operators' dashboard.

Exit status (``crawlfleet.service.options``): 0 after a clean stop (SIGTERM/SIGINT), 2 on bad
configuration (including a password Redis refuses), 1 when the service cannot run (Redis
unreachable at start, port taken). One line on stderr. REDIS_URL and, when set, the operators'
``DASHBOARD_OPERATOR_REDIS_URL`` are both checked before the port is bound, each error naming
its setting.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Callable, Sequence

import redis

from crawlfleet.dashboard.app import create_app
from crawlfleet.dashboard.config import ConfigError, Settings, build_parser, resolve
from crawlfleet.dashboard.jobs import OPERATOR_URL, write_client
from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.errors import RedisAuthError, RedisConfigError, RedisUrlError
from crawlfleet.hub.urls import mask_url
from crawlfleet.service import logs, runtime
from crawlfleet.service.options import ServiceFailure

PROG = "crawlfleet dashboard"
REDIS_PARAMS = {"socket_timeout": 10, "socket_connect_timeout": 5, "health_check_interval": 30}
log = logging.getLogger("crawlfleet.dashboard")


def checked(build: Callable[[], redis.Redis], url: str, setting: str) -> redis.Redis:
    """The client ``build`` makes, pinged: a refused password is bad configuration, an outage a
    failure (one line naming ``setting``)."""
    try:
        client = build()
        check_connection(client, url, setting)
    except RedisConfigError as exc:
        if isinstance(exc, RedisAuthError | RedisUrlError):
            raise ConfigError(str(exc)) from None
        raise ServiceFailure(str(exc)) from None
    return client


def connect(settings: Settings) -> redis.Redis:
    """The checked Redis client of the reads (and the operators' writes' URL checked too)."""
    client = checked(
        lambda: get_redis(settings.redis_url, **REDIS_PARAMS), settings.redis_url, "REDIS_URL"
    )
    if settings.operator_redis_url:
        checked(lambda: write_client(settings), settings.operator_redis_url, OPERATOR_URL)
    return client


async def serve(settings: Settings, client: redis.Redis, sock: socket.socket) -> int:
    stop = asyncio.Event()
    runtime.on_stop_signals(stop, log)
    app = create_app(settings, client)
    return await runtime.serve(
        app,
        sock,
        stop,
        lifespan="on",
        log=log,
        tls_cert=settings.tls_cert,
        tls_key=settings.tls_key,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def work() -> int:
        settings = resolve(args)
        logs.setup("kv", settings.log_level)
        client = connect(settings)
        sock = runtime.bind(settings.host, settings.port, "--host/DASHBOARD_HOST")
        log.info(
            "dashboard on %s://%s:%d/ reading %s (API key %s), operators writing %s",
            "https" if settings.tls_cert else "http",
            settings.host,
            sock.getsockname()[1],
            mask_url(settings.redis_url),
            "required" if settings.api_key else "not set",
            "through " + mask_url(settings.operator_redis_url or settings.redis_url)
            if settings.operator_password
            else "nothing (no operator password)",
            extra={"event": "start"},
        )
        return asyncio.run(serve(settings, client, sock))

    return runtime.run(PROG, work)


if __name__ == "__main__":
    sys.exit(main())
