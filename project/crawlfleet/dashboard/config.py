"""Dashboard settings: flags with environment equivalents, checked before anything starts.

A flag wins over the environment, the environment over the default. A bad value raises
:class:`ConfigError` with one line naming the flag and the variable (secrets masked). The API
key follows the rules of ``crawlfleet.service.secrets`` (environment or file, 16 characters at
least, required off loopback unless ``--insecure-no-api-key``; ``--allow-no-api-key`` and
``DASHBOARD_ALLOW_NO_API_KEY`` are kept as aliases). The key is read-only; the operator password
(``DASHBOARD_OPERATOR_PASSWORD`` or ``--operator-password-file``, a secret by the same rules, and
not the key) is what an operator logs in with to start, stop, pause and schedule jobs
(``crawlfleet.dashboard.jobs``); without it the dashboard is read-only. Those writes (and the
agents' log lines a logged-in operator asks for) go to Redis through ``--operator-redis-url`` /
``DASHBOARD_OPERATOR_REDIS_URL`` when it is set (under the Redis ACL: the ``operator`` user, while
every read keeps REDIS_URL's read-only ``dashboard`` user), else through REDIS_URL; it needs the
operator password.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from crawlfleet.hub.urls import mask_url
from crawlfleet.service import options
from crawlfleet.service.options import (
    ConfigError,
    Option,
    choice,
    http_url_or_empty,
    items,
    number,
    optional_text,
    redis_url,
    text,
)
from crawlfleet.service.secrets import MIN_API_KEY_LENGTH, ApiKeyNames, api_key
from crawlfleet.views.pools import PoolConfig

__all__ = ["OPTIONS", "ConfigError", "Settings", "build_parser", "resolve"]
DEFAULT_PORT = 8060
OPERATOR_REDIS_URL = "--operator-redis-url/DASHBOARD_OPERATOR_REDIS_URL"
KEY_NAMES = ApiKeyNames(
    "DASHBOARD",
    insecure_aliases=("DASHBOARD_ALLOW_NO_API_KEY",),
    flag_aliases=("--allow-no-api-key",),
)


def redis_url_or_empty(raw: str) -> str:
    """A Redis URL the connection helper can read, or empty for unset."""
    return redis_url(raw) if raw.strip() else ""


OPTIONS: tuple[Option, ...] = (
    *options.listen_options("DASHBOARD", DEFAULT_PORT, "address to listen on", "port"),
    *options.tls_options("DASHBOARD"),
    options.redis_url_option("the hub's Redis"),
    *KEY_NAMES.options(
        "API key, sent as `X-API-Key` or as the password of HTTP basic auth; required for a "
        "non-loopback `--host`"
    ),
    Option(
        "operator_password_file",
        "--operator-password-file",
        "DASHBOARD_OPERATOR_PASSWORD_FILE",
        "",
        "file holding the operator password (instead of DASHBOARD_OPERATOR_PASSWORD)",
        optional_text,
        metavar="FILE",
    ),
    Option(
        "operator_password",
        "--operator-password",
        "DASHBOARD_OPERATOR_PASSWORD",
        None,
        "the operators' password: logging in with it on the jobs page allows starting, "
        "stopping, pausing and scheduling jobs and seeding; unset: the dashboard is read-only; "
        f"at least {MIN_API_KEY_LENGTH} characters, not the API key",
        secret=True,
        file="operator_password_file",
    ),
    Option(
        "operator_redis_url",
        "--operator-redis-url",
        "DASHBOARD_OPERATOR_REDIS_URL",
        "",
        "Redis URL of the logged-in operators' writes and the agents' log lines they ask for "
        "(under the Redis ACL: the `operator` user, while REDIS_URL stays the read-only "
        "`dashboard` user); needs the operator password; unset: REDIS_URL",
        redis_url_or_empty,
        show=mask_url,
        metavar="URL",
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
        "alert_webhook",
        "--alert-webhook",
        "DASHBOARD_ALERT_WEBHOOK",
        "",
        "POST each alert that fires or resolves here as JSON (docs/alerts.md); unset: no webhook",
        http_url_or_empty,
        show=mask_url,
        metavar="URL",
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
    insecure_no_api_key: bool = DEFAULTS["insecure_no_api_key"]
    operator_password: str = ""
    operator_redis_url: str = DEFAULTS["operator_redis_url"]
    spiders: tuple[str, ...] = DEFAULTS["spiders"]
    sample_interval: float = DEFAULTS["sample_interval"]
    refresh: float = DEFAULTS["refresh"]
    pools: PoolConfig = field(default_factory=PoolConfig)
    log_level: str = DEFAULTS["log_level"]
    alert_webhook: str = DEFAULTS["alert_webhook"]


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


def operator_password(found: tuple[str, str] | None, key: str) -> str:
    """The checked operator password ("" when unset): long enough, and not the read-only key."""
    if not found:
        return ""
    password, source = found
    if len(password) < MIN_API_KEY_LENGTH:
        raise ConfigError(
            f"the operator password from {source} is too short: use at least "
            f"{MIN_API_KEY_LENGTH} characters (e.g. `openssl rand -hex 16`)"
        )
    if password == key:
        raise ConfigError(
            f"the operator password from {source} is the API key: the key is read-only, so the "
            "operator password must differ"
        )
    return password


def operator_redis_url(url: str, password: str) -> str:
    """The checked URL of the operators' writes ("" when unset): only with an operator password."""
    if url and not password:
        raise ConfigError(
            f"{OPERATOR_REDIS_URL} is set but there is no operator password "
            "(DASHBOARD_OPERATOR_PASSWORD or --operator-password-file), so no write can use it: "
            "set the password or unset the URL"
        )
    return url


def resolve(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Settings:
    """``Settings`` from the parsed flags and ``environ``, every value checked."""
    values = options.resolve(OPTIONS, args, environ)
    allowed = values["insecure_no_api_key"]
    options.check_tls(values, "DASHBOARD")
    key = api_key(KEY_NAMES, values["api_key"], values["host"], allowed) or ""
    password = operator_password(values["operator_password"], key)
    return Settings(
        host=values["host"],
        port=values["port"],
        tls_cert=values["tls_cert"],
        tls_key=values["tls_key"],
        redis_url=values["redis_url"],
        api_key=key,
        insecure_no_api_key=allowed,
        operator_password=password,
        operator_redis_url=operator_redis_url(values["operator_redis_url"], password),
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
        alert_webhook=values["alert_webhook"],
    )
