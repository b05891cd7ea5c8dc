"""Dashboard settings: flags with environment equivalents, checked before anything starts.

A flag wins over the environment, the environment over the default. A bad value raises
:class:`ConfigError` with one line naming the flag and the variable (secrets masked).
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from crawlfleet.clusterview import PoolConfig
from crawlfleet.redisconn import mask_url

DEFAULT_PORT = 8060


class ConfigError(ValueError):
    """A setting that cannot work (exit status 2)."""


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
        "--allow-no-api-key",
        action="store_true",
        default=_bool(env("DASHBOARD_ALLOW_NO_API_KEY", "")),
        help="listen on a non-loopback address without an API key (env "
        "DASHBOARD_ALLOW_NO_API_KEY; not recommended)",
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


def _bool(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _seconds(raw: str, flag: str, env: str, low: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= 86_400):
        raise ConfigError(f"{flag} / {env} must be seconds between {low:g} and 86400, got {raw!r}")
    return value


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _api_key(path: str, environ: Mapping[str, str]) -> str:
    if path:
        try:
            key = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"--api-key-file / DASHBOARD_API_KEY_FILE: cannot read it: {exc}"
            ) from None
        if not key:
            raise ConfigError(f"--api-key-file / DASHBOARD_API_KEY_FILE: {path} is empty")
        return key
    return environ.get("DASHBOARD_API_KEY", "").strip()


def _http_url(raw: str, flag: str, env: str) -> str:
    if not raw:
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{flag} / {env} must be an http(s):// URL, got {mask_url(raw)!r}")
    return raw


def resolve(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    try:
        port = int(args.port)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ConfigError(f"--port / DASHBOARD_PORT must be 1-65535, got {args.port!r}")
    if urlsplit(args.redis_url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"--redis-url / REDIS_URL must look like redis://[:password@]host:port/db, "
            f"got {mask_url(args.redis_url)!r}"
        )
    spiders: Sequence[str] = args.spider or [
        s.strip() for s in environ.get("DASHBOARD_SPIDERS", "").split(",") if s.strip()
    ]
    settings = Settings(
        host=args.host,
        port=port,
        redis_url=args.redis_url,
        api_key=_api_key(args.api_key_file, environ),
        allow_no_api_key=bool(args.allow_no_api_key),
        spiders=tuple(spiders),
        sample_interval=_seconds(
            args.sample_interval, "--sample-interval", "DASHBOARD_SAMPLE_INTERVAL", 0.1
        ),
        refresh=_seconds(args.refresh, "--refresh", "DASHBOARD_REFRESH", 0.2),
        pools=PoolConfig(
            proxypool_url=_http_url(args.proxypool_url, "--proxypool-url", "PROXYPOOL_URL"),
            proxypool_api_key=environ.get("PROXYPOOL_API_KEY", ""),
            accountpool_url=_http_url(args.accountpool_url, "--accountpool-url", "ACCOUNTPOOL_URL"),
            accountpool_api_key=environ.get("ACCOUNTPOOL_API_KEY", ""),
            accountpool_site=args.accountpool_site,
        ),
        log_level=args.log_level,
    )
    if not settings.api_key and not settings.allow_no_api_key and not is_loopback(settings.host):
        raise ConfigError(
            f"refusing to listen on non-loopback address {settings.host!r} without an API key: "
            "set DASHBOARD_API_KEY or --api-key-file (or pass --allow-no-api-key)"
        )
    return settings
