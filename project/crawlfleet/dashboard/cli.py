"""``crawlfleet dashboard`` (also ``crawlfleet-dashboard``): serve the operators' dashboard.

Exit status (``crawlfleet.service.options``): 0 after a clean stop (SIGTERM/SIGINT), 2 on bad
configuration (including a password Redis refuses), 1 when the service cannot run (Redis
unreachable at start, port taken). One line on stderr.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Sequence

import uvicorn

from crawlfleet.dashboard.app import create_app
from crawlfleet.dashboard.config import ConfigError, build_parser, resolve
from crawlfleet.redisconn import (
    RedisAuthError,
    RedisConfigError,
    RedisUrlError,
    check_connection,
    get_redis,
    mask_url,
)
from crawlfleet.service.http import server_options
from crawlfleet.service.options import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK

PROG = "crawlfleet dashboard"
REDIS_PARAMS = {"socket_timeout": 10, "socket_connect_timeout": 5, "health_check_interval": 30}


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = resolve(args)
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="time=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)r",
    )
    try:
        client = get_redis(settings.redis_url, **REDIS_PARAMS)
        check_connection(client, settings.redis_url)
        sock = _bind(settings.host, settings.port)
    except RedisConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG if isinstance(exc, RedisAuthError | RedisUrlError) else EXIT_FAILURE
    except OSError as exc:
        print(
            f"{PROG}: error: cannot listen on {settings.host}:{settings.port}: {exc}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    logging.getLogger("crawlfleet.dashboard").info(
        "dashboard on http://%s:%d/ reading %s (API key %s)",
        settings.host,
        sock.getsockname()[1],
        mask_url(settings.redis_url),
        "required" if settings.api_key else "not set",
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, client),
            log_config=None,
            log_level=settings.log_level,
            access_log=False,
            server_header=False,
            **server_options(),
        )
    )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
