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
from dataclasses import dataclass

from crawlfleet.accountpool.adapters import SiteAdapter, build_adapter
from crawlfleet.accountpool.crypto import PasswordBox, SecretKeyError
from crawlfleet.accountpool.sites import SiteConfigError, load_sites, parse_site_urls
from crawlfleet.service import options
from crawlfleet.service.options import (
    ConfigError,
    Option,
    choice,
    integer,
    number,
    optional_text,
)
from crawlfleet.service.secrets import ApiKeyNames, api_key

__all__ = ["OPTIONS", "ConfigError", "Settings", "settings_from_args"]
DEFAULT_PORT = 6777
KEY_NAMES = ApiKeyNames("ACCOUNTPOOL")
DAY = 86_400.0
MAX_CONCURRENCY = 1000


def _seconds(high: float, *, above: bool = True) -> options.Parser:
    return number(0, high, above=above, unit=" seconds")


def _site_url(raw: str) -> str:
    try:
        parse_site_urls(raw)
    except SiteConfigError as exc:
        raise ValueError(str(exc)) from None
    return raw.strip()


# Every command reads these.
COMMON: tuple[Option, ...] = (
    options.redis_url_option("Redis holding the pool"),
    Option(
        "sites",
        "--sites",
        "ACCOUNTPOOL_SITES_FILE",
        "",
        "YAML/JSON file of site adapters (empty: the built-in demosite adapter)",
        optional_text,
    ),
    Option(
        "site_url",
        "--site-url",
        "ACCOUNTPOOL_SITE_URLS",
        (),
        "override a site's base_url: NAME=URL (flag repeatable, replacing the variable; "
        "env comma-separated)",
        options.items(_site_url),
        kind="list",
        metavar="NAME=URL",
    ),
    Option(
        "secret_key_file",
        "--secret-key-file",
        "ACCOUNTPOOL_SECRET_KEY_FILE",
        "",
        "file holding the Fernet key(s) for passwords at rest (instead of ACCOUNTPOOL_SECRET_KEY)",
        optional_text,
    ),
    Option(
        "secret_key",
        None,
        "ACCOUNTPOOL_SECRET_KEY",
        None,
        "Fernet key(s) for passwords at rest, comma-separated, newest first "
        "(`crawlfleet accountpool keygen`)",
        secret=True,
        file="secret_key_file",
    ),
    Option(
        "log_level",
        "--log-level",
        "ACCOUNTPOOL_LOG_LEVEL",
        "info",
        "debug, info, warning or error",
        choice("debug", "info", "warning", "error"),
    ),
    Option(
        "log_format",
        "--log-format",
        "ACCOUNTPOOL_LOG_FORMAT",
        "json",
        "json or text (key=value; alias kv)",
        choice("json", "text", "kv"),
    ),
)
# The generator's and the tester's settings (serve, generate, test).
LOOPS: tuple[Option, ...] = (
    Option(
        "concurrency",
        "--concurrency",
        "ACCOUNTPOOL_CONCURRENCY",
        8,
        f"logins or checks in flight per site (1-{MAX_CONCURRENCY})",
        integer(1, MAX_CONCURRENCY),
    ),
    Option(
        "timeout",
        "--timeout",
        "ACCOUNTPOOL_TIMEOUT",
        10.0,
        "HTTP timeout of a login or check (s, at most 3600)",
        _seconds(3600),
    ),
    Option(
        "generate_interval",
        "--generate-interval",
        "ACCOUNTPOOL_GENERATE_INTERVAL",
        20.0,
        "seconds between generator cycles",
        _seconds(DAY),
    ),
    Option(
        "test_interval",
        "--test-interval",
        "ACCOUNTPOOL_TEST_INTERVAL",
        60.0,
        "seconds between tester cycles",
        _seconds(DAY),
    ),
    Option(
        "refresh_before",
        "--refresh-before",
        "ACCOUNTPOOL_REFRESH_BEFORE",
        300.0,
        "log in again this many seconds before a token expires (but not before half its lifetime)",
        _seconds(DAY, above=False),
    ),
    Option(
        "min_ttl",
        "--min-ttl",
        "ACCOUNTPOOL_MIN_TTL",
        30.0,
        "/random serves only tokens valid at least this many more seconds",
        _seconds(DAY, above=False),
    ),
    Option(
        "backoff_base",
        "--backoff-base",
        "ACCOUNTPOOL_BACKOFF_BASE",
        60.0,
        "first back-off after a failed login (s); doubles per failure",
        _seconds(DAY),
    ),
    Option(
        "backoff_max",
        "--backoff-max",
        "ACCOUNTPOOL_BACKOFF_MAX",
        3600.0,
        "longest login back-off (s, at most 604800: a week)",
        _seconds(7 * DAY),
    ),
)
# The HTTP API's settings (serve).
API: tuple[Option, ...] = (
    *options.listen_options(
        "ACCOUNTPOOL", DEFAULT_PORT, "address the API listens on", "port the API listens on"
    ),
    *options.tls_options("ACCOUNTPOOL"),
    *KEY_NAMES.options("key clients send in the X-API-Key header"),
)
OPTIONS: tuple[Option, ...] = COMMON + LOOPS + API
COMMANDS: dict[str, tuple[Option, ...]] = {
    "serve": OPTIONS,
    "generate": COMMON + LOOPS,
    "test": COMMON + LOOPS,
    "import": COMMON,
}


DEFAULTS = options.defaults(OPTIONS)


@dataclass(frozen=True)
class Settings:
    """The checked settings; every default is its option's (``OPTIONS``)."""

    redis_url: str
    adapters: dict[str, SiteAdapter]
    box: PasswordBox | None
    log_level: str
    log_format: str
    host: str = DEFAULTS["host"]
    port: int = DEFAULTS["port"]
    tls_cert: str = DEFAULTS["tls_cert"]
    tls_key: str = DEFAULTS["tls_key"]
    api_key: str | None = None
    concurrency: int = DEFAULTS["concurrency"]
    timeout: float = DEFAULTS["timeout"]
    generate_interval: float = DEFAULTS["generate_interval"]
    test_interval: float = DEFAULTS["test_interval"]
    refresh_before: float = DEFAULTS["refresh_before"]
    min_ttl: float = DEFAULTS["min_ttl"]
    backoff_base: float = DEFAULTS["backoff_base"]
    backoff_max: float = DEFAULTS["backoff_max"]


def _names(name: str) -> str:
    return next(opt.names for opt in OPTIONS if opt.name == name)


def settings_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> Settings:
    """Validate the parsed flags and the environment for ``args.command``."""
    values = options.resolve(COMMANDS[args.command], args, environ)
    try:
        urls: dict[str, str] = {}
        for item in values.pop("site_url"):
            urls.update(parse_site_urls(item))
        sites = load_sites(values.pop("sites") or None, urls)
        adapters = {name: build_adapter(spec) for name, spec in sites.items()}
    except SiteConfigError as exc:
        raise ConfigError(str(exc)) from None

    box = None
    secret = values.pop("secret_key")
    del values["secret_key_file"]
    if secret is not None:
        try:
            box = PasswordBox(*secret)
        except SecretKeyError as exc:
            raise ConfigError(str(exc)) from None
    elif args.command in ("serve", "generate", "import"):
        raise ConfigError(
            f"`{args.command}` handles passwords: set ACCOUNTPOOL_SECRET_KEY or "
            f"{_names('secret_key_file')} (create a key with `crawlfleet accountpool keygen`)"
        )
    if args.command in ("serve", "generate", "test"):
        if values["refresh_before"] < values["min_ttl"]:
            raise ConfigError(
                f"{_names('refresh_before')} must be >= {_names('min_ttl')}: otherwise "
                "tokens stop being served before they are refreshed"
            )
        if values["backoff_max"] < values["backoff_base"]:
            raise ConfigError(f"{_names('backoff_max')} must be >= {_names('backoff_base')}")
    if args.command == "serve":
        options.check_tls(values, "ACCOUNTPOOL")
        allowed = values.pop("insecure_no_api_key")
        del values["api_key_file"]
        values["api_key"] = api_key(KEY_NAMES, values["api_key"], values["host"], allowed)
    return Settings(adapters=adapters, box=box, **values)
