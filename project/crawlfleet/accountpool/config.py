"""Settings of the account pool: flags with environment equivalents, validated in one place.

Secrets never come from flags (a process list would show them): the Fernet key comes from
``ACCOUNTPOOL_SECRET_KEY`` or a key file, the API key from ``ACCOUNTPOOL_API_KEY`` or a key
file. Every problem is a ``ConfigError`` whose one-line message names the flag or variable.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from crawlfleet.accountpool.adapters import SiteAdapter, build_adapter
from crawlfleet.accountpool.crypto import PasswordBox, SecretKeyError
from crawlfleet.accountpool.sites import SiteConfigError, load_sites, parse_site_urls
from crawlfleet.redisconn import mask_url

DEFAULT_PORT = 6777
MIN_API_KEY_LENGTH = 16


class ConfigError(ValueError):
    """Configuration that cannot work; one line naming the flag or environment variable."""


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
        Option("--port", "ACCOUNTPOOL_PORT", str(DEFAULT_PORT), "port the API listens on"),
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
            "--concurrency", "ACCOUNTPOOL_CONCURRENCY", "8", "logins or checks in flight per site"
        ),
        Option("--timeout", "ACCOUNTPOOL_TIMEOUT", "10", "HTTP timeout of a login or check (s)"),
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
        Option("--backoff-max", "ACCOUNTPOOL_BACKOFF_MAX", "3600", "longest login back-off (s)"),
    )
}


def env_default(flag: str, environ: Mapping[str, str]) -> str:
    option = OPTIONS[flag]
    return environ.get(option.env, option.default)


def _names(flag: str) -> str:
    return f"{flag}/{OPTIONS[flag].env}"


def _truthy(value: str, flag: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(f"{_names(flag)} must be true or false, got {value!r}")


def _number(value: str, flag: str, minimum: float, *, strict: bool = False) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{_names(flag)} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < minimum or (strict and number == minimum):
        op = ">" if strict else ">="
        raise ConfigError(f"{_names(flag)} must be {op} {minimum:g}, got {value!r}")
    return number


def read_secret(
    env_name: str, file_flag: str, file_path: str, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """(secret, where it came from) from the variable or the file; None if neither is set."""
    direct = environ.get(env_name, "")
    if direct and file_path:
        raise ConfigError(f"set only one of {env_name} and {_names(file_flag)}")
    if direct:
        return direct.strip(), env_name
    if not file_path:
        return None
    try:
        text = Path(file_path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{_names(file_flag)}: cannot read {file_path}: {reason}") from None
    if not text:
        raise ConfigError(f"{_names(file_flag)}: {file_path} is empty")
    return text, f"{file_flag} {file_path}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    redis_url: str = args.redis_url
    if urlsplit(redis_url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"{_names('--redis-url')} must look like redis://[:password@]host:port/db, "
            f"got {mask_url(redis_url)!r}"
        )
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
            concurrency=int(_number(args.concurrency, "--concurrency", 1)),
            timeout=_number(args.timeout, "--timeout", 0, strict=True),
            generate_interval=_number(
                args.generate_interval, "--generate-interval", 0, strict=True
            ),
            test_interval=_number(args.test_interval, "--test-interval", 0, strict=True),
            refresh_before=_number(args.refresh_before, "--refresh-before", 0),
            min_ttl=_number(args.min_ttl, "--min-ttl", 0),
            backoff_base=_number(args.backoff_base, "--backoff-base", 0, strict=True),
            backoff_max=_number(args.backoff_max, "--backoff-max", 0, strict=True),
        )
        if settings.refresh_before < settings.min_ttl:
            raise ConfigError(
                f"{_names('--refresh-before')} must be >= {_names('--min-ttl')}: otherwise "
                "tokens stop being served before they are refreshed"
            )
        if settings.backoff_max < settings.backoff_base:
            raise ConfigError(f"{_names('--backoff-max')} must be >= {_names('--backoff-base')}")
    if args.command == "serve":
        port = int(_number(args.port, "--port", 1))
        if port > 65535:
            raise ConfigError(f"{_names('--port')} must be 1..65535, got {args.port!r}")
        api_key = read_secret("ACCOUNTPOOL_API_KEY", "--api-key-file", args.api_key_file, environ)
        if api_key is not None and len(api_key[0]) < MIN_API_KEY_LENGTH:
            raise ConfigError(
                f"the API key from {api_key[1]} is too short: use at least "
                f"{MIN_API_KEY_LENGTH} characters"
            )
        allow_open = (
            _truthy(environ.get("ACCOUNTPOOL_INSECURE_NO_API_KEY", ""), "--insecure-no-api-key")
            or args.insecure_no_api_key
        )
        if api_key is None and not is_loopback(args.host) and not allow_open:
            raise ConfigError(
                f"refusing to listen on {args.host} without an API key: set ACCOUNTPOOL_API_KEY "
                f"or {_names('--api-key-file')}, or pass --insecure-no-api-key"
            )
        settings = replace(
            settings, host=args.host, port=port, api_key=api_key[0] if api_key else None
        )
    return settings
