"""Flags and helpers shared by the operator commands status, seed, pause, resume and purge.

Not a command itself (it is not listed in ``crawlfleet.cli.COMMANDS``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawlfleet.clusterview import PoolConfig
from crawlfleet.redisconn import check_connection, get_redis

# Operator commands are short-lived: fail fast on an unreachable hub instead of hanging (redis-py
# would otherwise retry a dead connection several times with back-off).
REDIS_PARAMS = {"socket_timeout": 10, "socket_connect_timeout": 5, "retry": Retry(NoBackoff(), 0)}


class UsageError(ValueError):
    """Bad input from the operator (exit status 2); nothing has been changed."""


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
