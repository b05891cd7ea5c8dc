"""Settings of the account pool: flags with environment equivalents, validated in one place.

Secrets never come from flags (a process list would show them): the Fernet key comes from
``ACCOUNTPOOL_SECRET_KEY`` or a key file, the API key from ``ACCOUNTPOOL_API_KEY`` or a key
file. Every problem is a ``ConfigError`` whose one-line message names the flag or variable
(exit status 2). Integers are digits only (``--port 1e3`` is refused) and every number has a
range (``RANGES``): ``--concurrency`` at most 1000 logins or checks per site, timeouts at most
an hour, intervals and token margins at most a day, the back-off at most a week. The API key
follows ``crawlfleet.service.secrets``: at least 16 characters, required off loopback.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from crawlfleet.accountpool.adapters import SiteAdapter, build_adapter
from crawlfleet.accountpool.crypto import PasswordBox, SecretKeyError
from crawlfleet.accountpool.sites import SiteConfigError, load_sites, parse_site_urls
from crawlfleet.redisconn import RedisUrlError, validate_url
from crawlfleet.service import secrets
from crawlfleet.service.options import ConfigError, parse_int, parse_number
from crawlfleet.service.secrets import ApiKeyNames

__all__ = ["OPTIONS", "ConfigError", "Settings", "settings_from_args"]
DEFAULT_PORT = 6777
KEY_NAMES = ApiKeyNames("ACCOUNTPOOL")
DAY = 86_400.0
# Bounds of every number: (lowest, highest, lowest excluded).
RANGES: dict[str, tuple[float, float, bool]] = {
    "--timeout": (0, 3600, True),
    "--generate-interval": (0, DAY, True),
    "--test-interval": (0, DAY, True),
    "--refresh-before": (0, DAY, False),
    "--min-ttl": (0, DAY, False),
    "--backoff-base": (0, DAY, True),
    "--backoff-max": (0, 7 * DAY, True),
}
MAX_CONCURRENCY = 1000


@dataclass(frozen=True)
class Option:
    """One setting: its flag, environment variable, default and meaning (also used by docs)."""

    flag: str
    env: str
    default: str
    help: str


OPTIONS: dict[str, Option] = {
    o.flag: o
    for o in (
        Option("--redis-url", "REDIS_URL", "redis://127.0.0.1:6379/0", "Redis holding the pool"),
        Option(
            "--sites",
            "ACCOUNTPOOL_SITES_FILE",
            "",
            "YAML/JSON file of site adapters (empty: the built-in demosite adapter)",
        ),
        Option(
            "--site-url",
            "ACCOUNTPOOL_SITE_URLS",
            "",
            "override a site's base_url: NAME=URL (flag repeatable; env comma-separated)",
        ),
        Option(
            "--secret-key-file",
            "ACCOUNTPOOL_SECRET_KEY_FILE",
            "",
            "file holding the Fernet key(s) for passwords at rest "
            "(or the key itself in ACCOUNTPOOL_SECRET_KEY)",
        ),
        Option("--log-level", "ACCOUNTPOOL_LOG_LEVEL", "info", "debug, info, warning or error"),
        Option("--log-format", "ACCOUNTPOOL_LOG_FORMAT", "json", "json or text (key=value)"),
        Option("--host", "ACCOUNTPOOL_HOST", "127.0.0.1", "address the API listens on"),
        Option(
            "--port", "ACCOUNTPOOL_PORT", str(DEFAULT_PORT), "port the API listens on (1-65535)"
        ),
        Option(
            "--api-key-file",
            "ACCOUNTPOOL_API_KEY_FILE",
            "",
            "file holding the API key clients send in X-API-Key "
            "(or the key itself in ACCOUNTPOOL_API_KEY)",
        ),
        Option(
            "--insecure-no-api-key",
            "ACCOUNTPOOL_INSECURE_NO_API_KEY",
            "false",
            "listen on a non-loopback address without an API key (not recommended)",
        ),
        Option(
            "--concurrency",
            "ACCOUNTPOOL_CONCURRENCY",
            "8",
            "logins or checks in flight per site (1-1000)",
        ),
        Option(
            "--timeout",
            "ACCOUNTPOOL_TIMEOUT",
            "10",
            "HTTP timeout of a login or check (s, at most 3600)",
        ),
        Option(
            "--generate-interval",
            "ACCOUNTPOOL_GENERATE_INTERVAL",
            "20",
            "seconds between generator cycles",
        ),
        Option(
            "--test-interval", "ACCOUNTPOOL_TEST_INTERVAL", "60", "seconds between tester cycles"
        ),
        Option(
            "--refresh-before",
            "ACCOUNTPOOL_REFRESH_BEFORE",
            "300",
            "log in again this many seconds before a token expires "
            "(but not before half its lifetime)",
        ),
        Option(
            "--min-ttl",
            "ACCOUNTPOOL_MIN_TTL",
            "30",
            "/random serves only tokens valid at least this many more seconds",
        ),
        Option(
            "--backoff-base",
            "ACCOUNTPOOL_BACKOFF_BASE",
            "60",
            "first back-off after a failed login (s); doubles per failure",
        ),
        Option(
            "--backoff-max",
            "ACCOUNTPOOL_BACKOFF_MAX",
            "3600",
            "longest login back-off (s, at most 604800: a week)",
        ),
    )
}


def env_default(flag: str, environ: Mapping[str, str]) -> str:
    option = OPTIONS[flag]
    return environ.get(option.env, option.default)


def _names(flag: str) -> str:
    return f"{flag}/{OPTIONS[flag].env}"


def _number(value: str, flag: str) -> float:
    low, high, above = RANGES[flag]
    try:
        return parse_number(value, low, high, above=above, unit=" seconds")
    except ValueError as exc:
        raise ConfigError(f"{_names(flag)} {exc}, got {value[:40]!r}") from None


def _int(value: str, flag: str, low: int, high: int) -> int:
    try:
        return parse_int(value, low, high)
    except ValueError as exc:
        raise ConfigError(f"{_names(flag)} {exc}, got {value[:40]!r}") from None


def read_secret(
    env_name: str, file_flag: str, file_path: str, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """(secret, where it came from) from the variable or the file; None if neither is set."""
    return secrets.read_secret(env_name, _names(file_flag), file_path, environ)


@dataclass(frozen=True)
class Settings:
    redis_url: str
    adapters: dict[str, SiteAdapter]
    box: PasswordBox | None
    log_level: str
    log_format: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    concurrency: int = 8
    timeout: float = 10.0
    generate_interval: float = 20.0
    test_interval: float = 60.0
    refresh_before: float = 300.0
    min_ttl: float = 30.0
    backoff_base: float = 60.0
    backoff_max: float = 3600.0


def settings_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> Settings:
    """Validate the parsed flags (whose defaults already came from ``environ``)."""
    try:
        redis_url = validate_url(args.redis_url, _names("--redis-url"))
    except RedisUrlError as exc:
        raise ConfigError(str(exc)) from None
    log_level = args.log_level.lower()
    if log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"{_names('--log-level')} must be debug, info, warning or error")
    if args.log_format not in ("json", "text"):
        raise ConfigError(f"{_names('--log-format')} must be json or text")
    try:
        urls: dict[str, str] = {}
        for item in [environ.get("ACCOUNTPOOL_SITE_URLS", ""), *args.site_url]:
            urls.update(parse_site_urls(item))
        sites = load_sites(args.sites or None, urls)
        adapters = {name: build_adapter(spec) for name, spec in sites.items()}
    except SiteConfigError as exc:
        raise ConfigError(str(exc)) from None

    box = None
    secret = read_secret(
        "ACCOUNTPOOL_SECRET_KEY", "--secret-key-file", args.secret_key_file, environ
    )
    if secret is not None:
        try:
            box = PasswordBox(secret[0], secret[1])
        except SecretKeyError as exc:
            raise ConfigError(str(exc)) from None
    elif args.command in ("serve", "generate", "import"):
        raise ConfigError(
            f"`{args.command}` handles passwords: set ACCOUNTPOOL_SECRET_KEY or "
            f"{_names('--secret-key-file')} (create a key with `crawlfleet accountpool keygen`)"
        )

    settings = Settings(redis_url, adapters, box, log_level, args.log_format)
    if args.command in ("serve", "generate", "test"):
        settings = replace(
            settings,
            concurrency=_int(args.concurrency, "--concurrency", 1, MAX_CONCURRENCY),
            timeout=_number(args.timeout, "--timeout"),
            generate_interval=_number(args.generate_interval, "--generate-interval"),
            test_interval=_number(args.test_interval, "--test-interval"),
            refresh_before=_number(args.refresh_before, "--refresh-before"),
            min_ttl=_number(args.min_ttl, "--min-ttl"),
            backoff_base=_number(args.backoff_base, "--backoff-base"),
            backoff_max=_number(args.backoff_max, "--backoff-max"),
        )
        if settings.refresh_before < settings.min_ttl:
            raise ConfigError(
                f"{_names('--refresh-before')} must be >= {_names('--min-ttl')}: otherwise "
                "tokens stop being served before they are refreshed"
            )
        if settings.backoff_max < settings.backoff_base:
            raise ConfigError(f"{_names('--backoff-max')} must be >= {_names('--backoff-base')}")
    if args.command == "serve":
        port = _int(args.port, "--port", 1, 65535)
        allowed = secrets.insecure_allowed(KEY_NAMES, args.insecure_no_api_key, environ)
        api_key = secrets.api_key(KEY_NAMES, args.api_key_file, environ, args.host, allowed)
        settings = replace(settings, host=args.host, port=port, api_key=api_key)
    return settings
