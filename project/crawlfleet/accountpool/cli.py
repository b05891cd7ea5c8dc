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
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import IO

import httpx
from redis.asyncio import Redis
from redis.exceptions import RedisError

from crawlfleet.accountpool.accounts import parse_account_lines
from crawlfleet.accountpool.api import ApiState, create_app
from crawlfleet.accountpool.config import (
    API,
    COMMON,
    LOOPS,
    ConfigError,
    Settings,
    settings_from_args,
)
from crawlfleet.accountpool.crypto import DecryptError, generate_key
from crawlfleet.accountpool.generator import Generator
from crawlfleet.accountpool.periodic import repeat
from crawlfleet.accountpool.store import AccountStore, connect
from crawlfleet.accountpool.tester import Tester
from crawlfleet.hub.urls import mask_url
from crawlfleet.service import logs, runtime
from crawlfleet.service.options import (
    EXIT_CONFIG,
    EXIT_OK,
    ServiceFailure,
    add_arguments,
)

PROG = "crawlfleet accountpool"
log = logging.getLogger("crawlfleet.accountpool")


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    """The command line; values are read (with ``environ``) by ``settings_from_args``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description="The account pool: per-site accounts in, logged-in tokens out.",
    )
    common = argparse.ArgumentParser(add_help=False)
    add_arguments(common, COMMON)
    loops = argparse.ArgumentParser(add_help=False)
    add_arguments(loops, LOOPS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve", parents=[common, loops], allow_abbrev=False, help="run the API and both loops"
    )
    add_arguments(serve, API)
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
    """The runtime's start-up ping, then: the secret key must decrypt what Redis holds."""
    if not await runtime.check_redis(store.redis, url, required=required, log=log):
        return
    if store.box is not None:
        try:
            await store.verify_key()
        except DecryptError:
            raise ConfigError(
                "ACCOUNTPOOL_SECRET_KEY does not decrypt the passwords already stored in Redis "
                "(key changed? list the old key after the new one to rotate)"
            ) from None


def http_client(settings: Settings) -> httpx.AsyncClient:
    # trust_env=False: a stray HTTP(S)_PROXY must not carry passwords through a third party.
    return httpx.AsyncClient(
        timeout=settings.timeout,
        limits=httpx.Limits(max_connections=settings.concurrency * max(1, len(settings.adapters))),
        follow_redirects=False,
        trust_env=False,
    )


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
        sock = runtime.bind(settings.host, settings.port, "--host/ACCOUNTPOOL_HOST")
        async with http_client(settings) as client:
            generator, tester = _loops(settings, store, client)
            stop, wake = asyncio.Event(), asyncio.Event()
            state = ApiState(
                store,
                settings.redis_url,
                list(settings.adapters),
                settings.api_key,
                settings.min_ttl,
                wake if run_generator else None,
            )
            # (loop, its cycle, seconds between cycles, what wakes it early, whether it runs)
            wanted = (
                ("generate", generator.run_once, settings.generate_interval, wake, run_generator),
                ("test", tester.run_once, settings.test_interval, None, run_tester),
            )
            loops = [
                repeat(
                    name,
                    cycle,
                    interval=interval,
                    log=log,
                    redis_url=settings.redis_url,
                    stop=stop,
                    wake=woken_by,
                )
                for name, cycle, interval, woken_by, runs in wanted
                if runs
            ]
            log.info(
                "account pool listening on %s:%d for sites %s (API key %s)",
                settings.host,
                settings.port,
                ", ".join(settings.adapters),
                "required" if settings.api_key else "not set",
                extra={"event": "start", "redis": mask_url(settings.redis_url)},
            )
            runtime.on_stop_signals(stop, log)
            status = await runtime.serve(
                create_app(state),
                sock,
                stop,
                loops=loops,
                log=log,
                tls_cert=settings.tls_cert,
                tls_key=settings.tls_key,
            )
    finally:
        await store.redis.aclose()
    log.info("account pool stopped", extra={"event": "stop"})
    return status


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
                stop = asyncio.Event()
                runtime.on_stop_signals(stop, log)
                await repeat(
                    which,
                    cycle,
                    interval=interval,
                    log=log,
                    redis_url=settings.redis_url,
                    stop=stop,
                )
    finally:
        await store.redis.aclose()
    return EXIT_OK


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

    def work() -> int:
        settings = settings_from_args(args)
        logs.setup(settings.log_format, settings.log_level)
        if args.command == "serve":
            return asyncio.run(serve(settings, not args.no_generator, not args.no_tester))
        if args.command in ("generate", "test"):
            return asyncio.run(run_loop(settings, args.command, args.once, args.site))
        return asyncio.run(import_accounts(settings, args.site, args.file, sys.stdout))

    return runtime.run(PROG, work)


if __name__ == "__main__":
    sys.exit(main())
