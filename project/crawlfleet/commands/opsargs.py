"""Flags and helpers shared by the operator commands (status, seed, pause, purge, export, …).

Not a command itself (it is not listed in ``crawlfleet.cli.COMMANDS``). :func:`check_spider` is
the one validator of the SPIDER argument: a bad name is a one-line usage error (status 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.errors import BadSpiderName
from crawlfleet.hub.keys import check_spider_name
from crawlfleet.views.pools import PoolConfig

# Operator commands are short-lived: fail fast on an unreachable hub instead of hanging (redis-py
# would otherwise retry a dead connection several times with back-off).
REDIS_PARAMS = {"socket_timeout": 10, "socket_connect_timeout": 5, "retry": Retry(NoBackoff(), 0)}


class UsageError(ValueError):
    """Bad input from the operator (exit status 2); nothing has been changed."""


def check_spider(text: str) -> str:
    """``text`` if it names exactly one crawl's keys; :class:`UsageError` (one line) otherwise
    (the rule is the hub's: :func:`crawlfleet.hub.keys.check_spider_name`)."""
    try:
        return check_spider_name(text)
    except BadSpiderName as exc:
        raise UsageError(str(exc)) from None


def non_negative_int(text: str) -> int:
    """argparse ``type=`` of a count flag: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a whole number >= 0, got {text[:40]!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    if str(value) != text.strip():  # "1_000", "٣"
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text[:40]!r}")
    return value


class IntermixedParser(argparse.ArgumentParser):
    """A sub-command parser whose positionals may come before, between or after its options
    (``seed adv --new URL``): argparse's intermixed parsing, used for the sub-command's part."""

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing:  # parse_known_intermixed_args calls back in here
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def intermixed(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make a sub-command parser (made by ``add_parser``) accept intermixed positionals."""
    parser.__class__ = IntermixedParser
    return parser


def add_redis_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", ""),
        help="hub Redis URL (env REDIS_URL)",
    )


def add_pool_args(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    group = parser.add_argument_group("pools (sizes are shown when a URL is set)")
    group.add_argument(
        "--proxypool-url", default=env("PROXYPOOL_URL", ""), help="env PROXYPOOL_URL"
    )
    group.add_argument(
        "--accountpool-url", default=env("ACCOUNTPOOL_URL", ""), help="env ACCOUNTPOOL_URL"
    )
    group.add_argument(
        "--accountpool-site",
        default=env("ACCOUNTPOOL_SITE", "demosite"),
        help="site whose tokens are counted (env ACCOUNTPOOL_SITE, default %(default)s)",
    )


def pool_config(args: argparse.Namespace) -> PoolConfig:
    """Pool URLs from the flags; API keys only from the environment (never on a command line)."""
    return PoolConfig(
        proxypool_url=args.proxypool_url,
        proxypool_api_key=os.environ.get("PROXYPOOL_API_KEY", ""),
        accountpool_url=args.accountpool_url,
        accountpool_api_key=os.environ.get("ACCOUNTPOOL_API_KEY", ""),
        accountpool_site=args.accountpool_site,
    )


def connect(url: str) -> redis.Redis:
    """The hub's client, checked with one PING (one-line errors, password masked)."""
    if not url:
        raise UsageError("no Redis URL: pass --redis-url or set REDIS_URL")
    client = get_redis(url, **REDIS_PARAMS)
    check_connection(client, url)
    return client


def usage_failure(command: str, exc: Exception) -> int:
    print(f"crawlfleet {command}: error: {exc}", file=sys.stderr)
    return 2


def run_guarded(command: str, func: Any, args: argparse.Namespace) -> int:
    """Run ``func(args)``; a :class:`UsageError` becomes one line on stderr and status 2."""
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        if getattr(args, "debug", False):
            raise
        return usage_failure(command, exc)
