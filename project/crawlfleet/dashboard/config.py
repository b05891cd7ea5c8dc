"""Dashboard settings: flags with environment equivalents, checked before anything starts.

A flag wins over the environment, the environment over the default. A bad value raises
:class:`ConfigError` with one line naming the flag and the variable (secrets masked). The API
key follows the rules of ``crawlfleet.service.secrets`` (environment or file, 16 characters at
least, required off loopback unless ``--insecure-no-api-key``; ``--allow-no-api-key`` and
``DASHBOARD_ALLOW_NO_API_KEY`` are kept as aliases).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from crawlfleet.clusterview import PoolConfig
from crawlfleet.redisconn import mask_url
from crawlfleet.service import options
from crawlfleet.service.options import (
    ConfigError,
    Option,
    choice,
    http_url_or_empty,
    items,
    number,
    text,
)
from crawlfleet.service.secrets import ApiKeyNames, api_key

__all__ = ["OPTIONS", "ConfigError", "Settings", "build_parser", "resolve"]
DEFAULT_PORT = 8060
KEY_NAMES = ApiKeyNames(
    "DASHBOARD",
    insecure_aliases=("DASHBOARD_ALLOW_NO_API_KEY",),
    flag_aliases=("--allow-no-api-key",),
)

OPTIONS: tuple[Option, ...] = (
    *options.listen_options("DASHBOARD", DEFAULT_PORT, "address to listen on", "port"),
    *options.tls_options("DASHBOARD"),
    options.redis_url_option("the hub's Redis"),
    *KEY_NAMES.options(
        "API key, sent as `X-API-Key` or as the password of HTTP basic auth; required for a "
        "non-loopback `--host`"
    ),
    Option(
        "spiders",
        "--spider",
        "DASHBOARD_SPIDERS",
        (),
        "spiders shown and sampled (comma-separated in the variable; default: every spider found)",
        items(text),
        kind="list",
    ),
    Option(
        "sample_interval",
        "--sample-interval",
        "DASHBOARD_SAMPLE_INTERVAL",
        10.0,
        "seconds between queue-depth samples kept in Redis",
        number(0.1, 86_400, unit=" seconds"),
    ),
    Option(
        "refresh",
        "--refresh",
        "DASHBOARD_REFRESH",
        2.0,
        "seconds between the page's updates",
        number(0.2, 86_400, unit=" seconds"),
    ),
    Option(
        "proxypool_url",
        "--proxypool-url",
        "PROXYPOOL_URL",
        "",
        "show the proxy pool's size",
        http_url_or_empty,
        show=mask_url,
    ),
    Option(
        "proxypool_api_key",
        None,
        "PROXYPOOL_API_KEY",
        None,
        "the proxy pool's API key",
        secret=True,
    ),
    Option(
        "accountpool_url",
        "--accountpool-url",
        "ACCOUNTPOOL_URL",
        "",
        "show the account pool's size",
        http_url_or_empty,
        show=mask_url,
    ),
    Option(
        "accountpool_api_key",
        None,
        "ACCOUNTPOOL_API_KEY",
        None,
        "the account pool's API key",
        secret=True,
    ),
    Option(
        "accountpool_site",
        "--accountpool-site",
        "ACCOUNTPOOL_SITE",
        "demosite",
        "site whose tokens are counted",
        text,
    ),
    Option(
        "log_level",
        "--log-level",
        "DASHBOARD_LOG_LEVEL",
        "info",
        "debug, info, warning or error (key=value lines on stderr)",
        choice("debug", "info", "warning", "error"),
    ),
)


DEFAULTS = options.defaults(OPTIONS)


@dataclass(frozen=True)
class Settings:
    """The checked settings; every default is its option's (``OPTIONS``)."""

    host: str = DEFAULTS["host"]
    port: int = DEFAULTS["port"]
    tls_cert: str = DEFAULTS["tls_cert"]
    tls_key: str = DEFAULTS["tls_key"]
    redis_url: str = DEFAULTS["redis_url"]
    api_key: str = ""
    allow_no_api_key: bool = False
    spiders: tuple[str, ...] = DEFAULTS["spiders"]
    sample_interval: float = DEFAULTS["sample_interval"]
    refresh: float = DEFAULTS["refresh"]
    pools: PoolConfig = field(default_factory=PoolConfig)
    log_level: str = DEFAULTS["log_level"]


def build_parser(environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    """The command line; values are read (with the environment) by ``resolve``."""
    parser = argparse.ArgumentParser(
        prog="crawlfleet dashboard",
        description="The operators' dashboard: live crawl status page, JSON API and /metrics.",
    )
    options.add_arguments(parser, OPTIONS)
    return parser


def _secret(found: tuple[str, str] | None) -> str:
    return found[0] if found else ""


def resolve(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    """``Settings`` from the parsed flags and ``environ``, every value checked."""
    values = options.resolve(OPTIONS, args, environ)
    allowed = values["insecure_no_api_key"]
    options.check_tls(values, "DASHBOARD")
    return Settings(
        host=values["host"],
        port=values["port"],
        tls_cert=values["tls_cert"],
        tls_key=values["tls_key"],
        redis_url=values["redis_url"],
        api_key=api_key(KEY_NAMES, values["api_key"], values["host"], allowed) or "",
        allow_no_api_key=allowed,
        spiders=values["spiders"],
        sample_interval=values["sample_interval"],
        refresh=values["refresh"],
        pools=PoolConfig(
            proxypool_url=values["proxypool_url"],
            proxypool_api_key=_secret(values["proxypool_api_key"]),
            accountpool_url=values["accountpool_url"],
            accountpool_api_key=_secret(values["accountpool_api_key"]),
            accountpool_site=values["accountpool_site"],
        ),
        log_level=values["log_level"],
    )
