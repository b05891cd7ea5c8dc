"""``crawlfleet accountpool serve|generate|test|import|keygen`` (also ``crawlfleet-accountpool``).

``serve`` runs the HTTP API with the generator and tester loops in one process; ``generate``
and ``test`` run one loop alone (or one cycle with ``--once``); ``import`` reads
``user:password`` lines from a file or stdin; ``keygen`` prints a new secret key. Exit status
as for every hub service (``crawlfleet.service.options``): 0 when done, 1 when the service
cannot run (Redis unreachable, the port taken, an unreadable import file, skipped lines), 2 on
bad configuration or usage (a wrong password or secret key included), one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from types import FrameType
from typing import IO

import httpx
import uvicorn
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, RedisError

from crawlfleet.accountpool.accounts import parse_account_lines
from crawlfleet.accountpool.api import ApiState, create_app
from crawlfleet.accountpool.config import (
    OPTIONS,
    ConfigError,
    Settings,
    env_default,
    settings_from_args,
)
from crawlfleet.accountpool.crypto import DecryptError, generate_key
from crawlfleet.accountpool.generator import Generator
from crawlfleet.accountpool.logs import setup_logging
from crawlfleet.accountpool.periodic import repeat
from crawlfleet.accountpool.store import AccountStore, connect
from crawlfleet.accountpool.tester import Tester
from crawlfleet.redisconn import has_credentials, mask_url
from crawlfleet.service.http import server_options
from crawlfleet.service.options import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, ServiceFailure

PROG = "crawlfleet accountpool"
log = logging.getLogger("crawlfleet.accountpool")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _ignore_signal(signum: int, frame: FrameType | None) -> None:
    """Placeholder handler while uvicorn owns the stop signals (see ``serve``)."""


def _add(parser: argparse.ArgumentParser, flag: str, environ: Mapping[str, str]) -> None:
    option = OPTIONS[flag]
    if flag == "--insecure-no-api-key":
        parser.add_argument(flag, action="store_true", help=f"{option.help} (env {option.env})")
    elif flag == "--site-url":
        parser.add_argument(
            flag,
            action="append",
            default=[],
            metavar="NAME=URL",
            help=f"{option.help} (env {option.env})",
        )
    else:
        parser.add_argument(
            flag,
            default=env_default(flag, environ),
            help=f"{option.help} (env {option.env}; default {option.default or 'unset'})",
        )


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description="The account pool: per-site accounts in, logged-in tokens out.",
    )
    common = argparse.ArgumentParser(add_help=False)
    for flag in (
        "--redis-url",
        "--sites",
        "--site-url",
        "--secret-key-file",
        "--log-level",
        "--log-format",
    ):
        _add(common, flag, environ)
    loops = argparse.ArgumentParser(add_help=False)
    for flag in (
        "--concurrency",
        "--timeout",
        "--generate-interval",
        "--test-interval",
        "--refresh-before",
        "--min-ttl",
        "--backoff-base",
        "--backoff-max",
    ):
        _add(loops, flag, environ)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve", parents=[common, loops], allow_abbrev=False, help="run the API and both loops"
    )
    for flag in ("--host", "--port", "--api-key-file", "--insecure-no-api-key"):
        _add(serve, flag, environ)
    serve.add_argument("--no-generator", action="store_true", help="do not run the generator")
    serve.add_argument("--no-tester", action="store_true", help="do not run the tester")
    for name, what in (
        ("generate", "log in accounts that lack a valid credential"),
        ("test", "check stored credentials against each site"),
    ):
        cmd = sub.add_parser(name, parents=[common, loops], allow_abbrev=False, help=what)
        cmd.add_argument("--once", action="store_true", help="run one cycle and exit")
        cmd.add_argument("--site", help="only this site")
    imp = sub.add_parser(
        "import", parents=[common], allow_abbrev=False, help="add user:password lines to a site"
    )
    imp.add_argument("site", metavar="SITE")
    imp.add_argument("file", metavar="FILE", help="file of user:password lines, or - for stdin")
    sub.add_parser("keygen", help="print a new ACCOUNTPOOL_SECRET_KEY")
    return parser


def make_redis(url: str) -> Redis:
    try:
        return connect(url)
    except ValueError as exc:
        raise ConfigError(f"invalid --redis-url/REDIS_URL {mask_url(url)!r}: {exc}") from None


async def check_redis(store: AccountStore, url: str, *, required: bool) -> None:
    """Fail on a wrong password or secret key; on an outage fail only if ``required``."""
    try:
        await store.redis.ping()
        if store.box is not None:
            await store.verify_key()
    except AuthenticationError:
        if not has_credentials(url):
            raise ConfigError(
                f"Redis at {mask_url(url)} needs a valid password (REDIS_URL has none)"
            ) from None
        raise ConfigError(f"Redis at {mask_url(url)} rejected the password (REDIS_URL)") from None
    except DecryptError:
        raise ConfigError(
            "ACCOUNTPOOL_SECRET_KEY does not decrypt the passwords already stored in Redis "
            "(key changed? list the old key after the new one to rotate)"
        ) from None
    except (RedisError, OSError) as exc:
        if required:
            raise ServiceFailure(
                f"cannot reach Redis at {mask_url(url)} (REDIS_URL): {exc}"
            ) from None
        log.warning(
            "Redis at %s unreachable at start (%s); serving 503 until it answers",
            mask_url(url),
            exc,
            extra={"event": "redis_unavailable"},
        )


def http_client(settings: Settings) -> httpx.AsyncClient:
    # trust_env=False: a stray HTTP(S)_PROXY must not carry passwords through a third party.
    return httpx.AsyncClient(
        timeout=settings.timeout,
        limits=httpx.Limits(max_connections=settings.concurrency * max(1, len(settings.adapters))),
        follow_redirects=False,
        trust_env=False,
    )


def bind_socket(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ConfigError(f"--host/ACCOUNTPOOL_HOST {host!r}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ServiceFailure(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def _loops(
    settings: Settings, store: AccountStore, client: httpx.AsyncClient
) -> tuple[Generator, Tester]:
    generator = Generator(
        store,
        settings.adapters,
        client,
        concurrency=settings.concurrency,
        refresh_before=settings.refresh_before,
        backoff_base=settings.backoff_base,
        backoff_max=settings.backoff_max,
    )
    return generator, Tester(store, settings.adapters, client, concurrency=settings.concurrency)


async def serve(settings: Settings, run_generator: bool, run_tester: bool) -> int:
    store = AccountStore(make_redis(settings.redis_url), settings.box)
    try:
        await check_redis(store, settings.redis_url, required=False)
        sock = bind_socket(settings.host, settings.port)
        async with http_client(settings) as client:
            generator, tester = _loops(settings, store, client)
            wake = asyncio.Event()
            state = ApiState(
                store,
                settings.redis_url,
                list(settings.adapters),
                settings.api_key,
                settings.min_ttl,
                wake if run_generator else None,
            )
            server = uvicorn.Server(
                uvicorn.Config(
                    create_app(state),
                    host=settings.host,
                    port=settings.port,
                    log_config=None,
                    access_log=False,
                    server_header=False,
                    lifespan="off",
                    **server_options(),
                )
            )
            tasks = []
            if run_generator:
                tasks.append(
                    asyncio.create_task(
                        repeat(
                            "generate",
                            generator.run_once,
                            interval=settings.generate_interval,
                            log=log,
                            redis_url=settings.redis_url,
                            wake=wake,
                        )
                    )
                )
            if run_tester:
                tasks.append(
                    asyncio.create_task(
                        repeat(
                            "test",
                            tester.run_once,
                            interval=settings.test_interval,
                            log=log,
                            redis_url=settings.redis_url,
                        )
                    )
                )
            log.info(
                "account pool listening on %s:%d for sites %s (API key %s)",
                settings.host,
                settings.port,
                ", ".join(settings.adapters),
                "required" if settings.api_key else "not set",
                extra={"event": "start", "redis": mask_url(settings.redis_url)},
            )
            # uvicorn re-raises the stop signal after its graceful shutdown; these no-op
            # handlers receive it, so the loops are cancelled and Redis closed before exit 0.
            previous = {sig: signal.signal(sig, _ignore_signal) for sig in STOP_SIGNALS}
            try:
                await server.serve(sockets=[sock])
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                sock.close()
    finally:
        await store.redis.aclose()
    log.info("account pool stopped", extra={"event": "stop"})
    return 0


async def _until_signal(work: Awaitable[object]) -> None:
    """Run ``work`` until it ends or SIGTERM/SIGINT arrives (then cancel it cleanly)."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def run_loop(settings: Settings, which: str, once: bool, site: str | None) -> int:
    if site is not None:
        if site not in settings.adapters:
            known = ", ".join(settings.adapters)
            raise ConfigError(f"--site: unknown site {site!r} (known: {known})")
        settings = replace(settings, adapters={site: settings.adapters[site]})
    store = AccountStore(make_redis(settings.redis_url), settings.box)
    try:
        await check_redis(store, settings.redis_url, required=once)
        async with http_client(settings) as client:
            generator, tester = _loops(settings, store, client)
            cycle = generator.run_once if which == "generate" else tester.run_once
            interval = settings.generate_interval if which == "generate" else settings.test_interval
            if once:
                try:
                    await cycle()
                except (RedisError, OSError) as exc:
                    where = mask_url(settings.redis_url)
                    raise ServiceFailure(f"Redis at {where}: {exc}") from None
            else:
                await _until_signal(
                    repeat(which, cycle, interval=interval, log=log, redis_url=settings.redis_url)
                )
    finally:
        await store.redis.aclose()
    return 0


async def import_accounts(settings: Settings, site: str, path: str, out: IO[str]) -> int:
    if site not in settings.adapters:
        raise ConfigError(f"unknown site {site!r} (known: {', '.join(settings.adapters)})")
    try:
        if path == "-":
            good, problems = parse_account_lines(sys.stdin.buffer)
        else:
            with open(path, "rb") as handle:
                good, problems = parse_account_lines(handle)
    except OSError as exc:
        raise ServiceFailure(f"cannot read {path}: {exc.strerror}") from None
    for problem in problems:
        print(f"{PROG} import: skipped {problem}", file=sys.stderr)
    store = AccountStore(make_redis(settings.redis_url), settings.box)
    try:
        await check_redis(store, settings.redis_url, required=True)
        try:
            added, updated = await store.add_accounts(site, good)
        except (RedisError, OSError) as exc:
            raise ServiceFailure(f"Redis at {mask_url(settings.redis_url)}: {exc}") from None
    finally:
        await store.redis.aclose()
    print(
        f"imported {added + updated} accounts into {site} ({added} new, {updated} updated); "
        f"skipped {len(problems)} malformed lines",
        file=out,
    )
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_CONFIG
    if args.command == "keygen":
        print(generate_key())
        return EXIT_OK
    try:
        settings = settings_from_args(args)
        setup_logging(settings.log_level, settings.log_format)
        if args.command == "serve":
            return asyncio.run(serve(settings, not args.no_generator, not args.no_tester))
        if args.command in ("generate", "test"):
            return asyncio.run(run_loop(settings, args.command, args.once, args.site))
        return asyncio.run(import_accounts(settings, args.site, args.file, sys.stdout))
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ServiceFailure as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
