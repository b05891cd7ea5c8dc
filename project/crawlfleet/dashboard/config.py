"""Dashboard settings: flags with environment equivalents, checked before anything starts.

A flag wins over the environment, the environment over the default. A bad value raises
:class:`ConfigError` with one line naming the flag and the variable (secrets masked). The API
key follows the rules of ``crawlfleet.service.secrets`` (environment or file, 16 characters at
least, required off loopback unless ``--insecure-no-api-key``; ``--allow-no-api-key`` and
``DASHBOARD_ALLOW_NO_API_KEY`` are kept as aliases).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from crawlfleet.clusterview import PoolConfig
from crawlfleet.redisconn import RedisUrlError, validate_url
from crawlfleet.service.options import ConfigError, http_url, parse_int
from crawlfleet.service.secrets import INSECURE_FLAG, ApiKeyNames, api_key, insecure_allowed

__all__ = ["ConfigError", "Settings", "build_parser", "resolve"]
DEFAULT_PORT = 8060
KEY_NAMES = ApiKeyNames(
    "DASHBOARD",
    insecure_aliases=("DASHBOARD_ALLOW_NO_API_KEY",),
    flag_aliases=("--allow-no-api-key",),
)


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    redis_url: str = "redis://127.0.0.1:6379/0"
    api_key: str = ""
    allow_no_api_key: bool = False
    spiders: tuple[str, ...] = ()
    sample_interval: float = 10.0
    refresh: float = 2.0
    pools: PoolConfig = field(default_factory=PoolConfig)
    log_level: str = "info"


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    env = environ.get
    p = argparse.ArgumentParser(
        prog="crawlfleet dashboard",
        description="The operators' dashboard: live crawl status page, JSON API and /metrics.",
    )
    p.add_argument("--host", default=env("DASHBOARD_HOST", "127.0.0.1"), help="env DASHBOARD_HOST")
    p.add_argument(
        "--port", default=env("DASHBOARD_PORT", str(DEFAULT_PORT)), help="env DASHBOARD_PORT"
    )
    p.add_argument(
        "--redis-url", default=env("REDIS_URL", "redis://127.0.0.1:6379/0"), help="env REDIS_URL"
    )
    p.add_argument(
        "--api-key-file",
        default=env("DASHBOARD_API_KEY_FILE", ""),
        help="file holding the API key (env DASHBOARD_API_KEY_FILE, or the key in "
        "DASHBOARD_API_KEY); sent as X-API-Key or as the password of HTTP basic auth",
    )
    p.add_argument(
        INSECURE_FLAG,
        "--allow-no-api-key",
        dest="allow_no_api_key",
        action="store_true",
        help="listen on a non-loopback address without an API key (env "
        "DASHBOARD_INSECURE_NO_API_KEY, alias DASHBOARD_ALLOW_NO_API_KEY; not recommended)",
    )
    p.add_argument(
        "--spider",
        action="append",
        default=None,
        help="show only these spiders (repeatable; env DASHBOARD_SPIDERS, comma-separated; "
        "default: every spider found)",
    )
    p.add_argument(
        "--sample-interval",
        default=env("DASHBOARD_SAMPLE_INTERVAL", "10"),
        help="seconds between queue-depth samples kept in Redis (env DASHBOARD_SAMPLE_INTERVAL)",
    )
    p.add_argument(
        "--refresh",
        default=env("DASHBOARD_REFRESH", "2"),
        help="seconds between the page's updates (env DASHBOARD_REFRESH)",
    )
    p.add_argument(
        "--proxypool-url",
        default=env("PROXYPOOL_URL", ""),
        help="env PROXYPOOL_URL (key in PROXYPOOL_API_KEY)",
    )
    p.add_argument(
        "--accountpool-url",
        default=env("ACCOUNTPOOL_URL", ""),
        help="env ACCOUNTPOOL_URL (key in ACCOUNTPOOL_API_KEY)",
    )
    p.add_argument(
        "--accountpool-site",
        default=env("ACCOUNTPOOL_SITE", "demosite"),
        help="site whose tokens are counted (env ACCOUNTPOOL_SITE)",
    )
    p.add_argument(
        "--log-level",
        default=env("DASHBOARD_LOG_LEVEL", "info"),
        choices=("debug", "info", "warning", "error"),
        help="env DASHBOARD_LOG_LEVEL",
    )
    return p


def _seconds(raw: str, flag: str, env: str, low: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= 86_400):
        raise ConfigError(f"{flag} / {env} must be seconds between {low:g} and 86400, got {raw!r}")
    return value


def resolve(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    try:
        port = parse_int(args.port, 1, 65535)
    except ValueError as exc:
        raise ConfigError(f"--port / DASHBOARD_PORT {exc}, got {args.port!r}") from None
    try:
        redis_url = validate_url(args.redis_url, "--redis-url / REDIS_URL")
    except RedisUrlError as exc:
        raise ConfigError(str(exc)) from None
    spiders: Sequence[str] = args.spider or [
        s.strip() for s in environ.get("DASHBOARD_SPIDERS", "").split(",") if s.strip()
    ]
    allowed = insecure_allowed(KEY_NAMES, bool(args.allow_no_api_key), environ)

    def pool_url(raw: str, names: str) -> str:
        return http_url(raw, names) if raw else ""

    return Settings(
        host=args.host,
        port=port,
        redis_url=redis_url,
        api_key=api_key(KEY_NAMES, args.api_key_file, environ, args.host, allowed) or "",
        allow_no_api_key=allowed,
        spiders=tuple(spiders),
        sample_interval=_seconds(
            args.sample_interval, "--sample-interval", "DASHBOARD_SAMPLE_INTERVAL", 0.1
        ),
        refresh=_seconds(args.refresh, "--refresh", "DASHBOARD_REFRESH", 0.2),
        pools=PoolConfig(
            proxypool_url=pool_url(args.proxypool_url, "--proxypool-url / PROXYPOOL_URL"),
            proxypool_api_key=environ.get("PROXYPOOL_API_KEY", ""),
            accountpool_url=pool_url(args.accountpool_url, "--accountpool-url / ACCOUNTPOOL_URL"),
            accountpool_api_key=environ.get("ACCOUNTPOOL_API_KEY", ""),
            accountpool_site=args.accountpool_site,
        ),
        log_level=args.log_level,
    )
