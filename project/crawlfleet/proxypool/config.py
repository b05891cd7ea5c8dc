"""Proxy pool settings: one table of options, each settable by a flag or a ``PROXYPOOL_*`` variable.

A flag wins over the environment, the environment over the default. Every value is checked
here, before anything starts, and a bad one raises ``ConfigError`` with a one-line message
that names both the flag and the variable. The API key is the exception: it never comes from
a flag (``ps`` would show it) but from ``PROXYPOOL_API_KEY`` or the file named by
``--api-key-file`` / ``PROXYPOOL_API_KEY_FILE``; ``--api-key`` is refused with one line.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from crawlfleet.hub.urls import mask_url
from crawlfleet.proxypool.proxies import ProxyFormatError, mask_proxy, parse_proxy
from crawlfleet.service import options
from crawlfleet.service.options import (
    ConfigError,
    Option,
    boolean,
    choice,
    integer,
    items,
    parse_http_url,
    text,
)
from crawlfleet.service.secrets import ApiKeyNames, api_key

__all__ = ["OPTIONS", "ConfigError", "Settings", "add_arguments", "describe", "resolve"]
KEY_NAMES = ApiKeyNames("PROXYPOOL")


# ---- value parsers: each raises ValueError with the reason (the table adds flag and variable)


def _seconds(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("must be a number of seconds greater than 0") from None
    if not 0 < value <= 86_400:  # also rejects nan
        raise ValueError("must be a number of seconds greater than 0 and at most 86400")
    return value


def _statuses(raw: str) -> frozenset[int]:
    codes: set[int] = set()
    for item in re.split(r"[,\s]+", raw.strip()):
        if not item:
            continue
        low, _, high = item.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"{item!r} is not a status code or range like 200-299") from None
        if not 100 <= first <= last <= 599:
            raise ValueError(f"{item!r} is outside 100-599")
        codes.update(range(first, last + 1))
    if not codes:
        raise ValueError("needs at least one status code")
    return frozenset(codes)


def _proxy(raw: str) -> str:
    try:
        return parse_proxy(raw)
    except ProxyFormatError as exc:
        raise ValueError(f"is not a proxy: {exc}") from None


def safe_url(url: str) -> str:
    """``url`` fit for a log: password masked, query string dropped (provider URLs carry keys)."""
    return mask_url(url.split("?", 1)[0])


_LEVELS = choice("debug", "info", "warning", "error")

OPTIONS: tuple[Option, ...] = (
    *options.listen_options(
        "PROXYPOOL", 5555, "address the HTTP API listens on", "port of the HTTP API"
    ),
    *options.tls_options("PROXYPOOL"),
    options.redis_url_option("Redis holding the pool"),
    Option(
        "redis_key",
        "--redis-key",
        "PROXYPOOL_REDIS_KEY",
        "proxypool:proxies",
        "sorted set of proxies (statistics go to <key>:stats; on a Redis Cluster both under the "
        "hash tag {<key>})",
    ),
    *KEY_NAMES.options("key clients send in the X-API-Key header"),
    Option(
        "fetch_interval",
        "--fetch-interval",
        "PROXYPOOL_FETCH_INTERVAL",
        300.0,
        "seconds between two fetches of the sources",
        _seconds,
    ),
    Option(
        "test_interval",
        "--test-interval",
        "PROXYPOOL_TEST_INTERVAL",
        60.0,
        "seconds between two test rounds",
        _seconds,
    ),
    Option(
        "test_url",
        "--test-url",
        "PROXYPOOL_TEST_URL",
        None,
        "URL fetched through each proxy to test it (your target site)",
        parse_http_url,
    ),
    Option(
        "test_statuses",
        "--test-status",
        "PROXYPOOL_TEST_STATUS",
        frozenset({200}),
        "HTTP statuses that count as a pass, e.g. 200,301-302",
        _statuses,
    ),
    Option(
        "test_concurrency",
        "--test-concurrency",
        "PROXYPOOL_TEST_CONCURRENCY",
        50,
        "proxies tested at the same time",
        integer(1, 10_000),
    ),
    Option(
        "test_timeout",
        "--test-timeout",
        "PROXYPOOL_TEST_TIMEOUT",
        10.0,
        "seconds allowed for one proxy's test",
        _seconds,
    ),
    Option(
        "anonymity_check",
        "--anonymity-check",
        "PROXYPOOL_ANONYMITY_CHECK",
        False,
        "fail proxies that reveal the tester's own address",
        boolean,
        kind="switch",
    ),
    Option(
        "anonymity_url",
        "--anonymity-url",
        "PROXYPOOL_ANONYMITY_URL",
        None,
        "URL that echoes the caller's address (default: the test URL)",
        parse_http_url,
    ),
    Option(
        "score_step",
        "--score-step",
        "PROXYPOOL_SCORE_STEP",
        10,
        "points a proxy loses per failed test",
        integer(1, 100),
    ),
    Option(
        "report_step",
        "--report-step",
        "PROXYPOOL_REPORT_STEP",
        10,
        "points a proxy loses per POST /report with reason=failed",
        integer(1, 100),
    ),
    Option(
        "max_size",
        "--max-size",
        "PROXYPOOL_MAX_SIZE",
        20_000,
        "most proxies kept; new ones are refused when full",
        integer(1, 10_000_000),
    ),
    Option(
        "max_count",
        "--max-count",
        "PROXYPOOL_MAX_COUNT",
        100,
        "largest N accepted by GET /random?count=N",
        integer(1, 10_000),
    ),
    Option(
        "proxies",
        "--proxy",
        "PROXYPOOL_PROXIES",
        (),
        "static proxies (repeat the flag; comma or space separated in the variable)",
        items(_proxy, mask_proxy),
        kind="list",
        show=mask_proxy,
    ),
    Option(
        "proxies_file",
        "--proxies-file",
        "PROXYPOOL_PROXIES_FILE",
        None,
        "file with one proxy per line, re-read at every fetch",
    ),
    Option(
        "source_urls",
        "--source-url",
        "PROXYPOOL_SOURCE_URLS",
        (),
        "URLs answering host:port lines (repeat the flag; comma or space separated)",
        items(parse_http_url, safe_url),
        kind="list",
        show=safe_url,
    ),
    Option(
        "source_plugins",
        "--source-plugin",
        "PROXYPOOL_SOURCE_PLUGINS",
        (),
        "entry points of group crawlfleet.proxypool.sources to use",
        items(text),
        kind="list",
    ),
    Option(
        "source_timeout",
        "--source-timeout",
        "PROXYPOOL_SOURCE_TIMEOUT",
        15.0,
        "seconds allowed for one source URL or plug-in",
        _seconds,
    ),
    Option(
        "fetch_loop",
        "--no-fetch",
        "PROXYPOOL_FETCH_LOOP",
        True,
        "serve: do not run the fetch loop in this process",
        boolean,
        kind="negswitch",
    ),
    Option(
        "test_loop",
        "--no-test",
        "PROXYPOOL_TEST_LOOP",
        True,
        "serve: do not run the test loop in this process",
        boolean,
        kind="negswitch",
    ),
    Option(
        "log_format",
        "--log-format",
        "PROXYPOOL_LOG_FORMAT",
        "kv",
        "log lines as key=value pairs (kv, alias text) or JSON objects",
        choice("kv", "json", "text"),
    ),
    Option(
        "log_level",
        "--log-level",
        "PROXYPOOL_LOG_LEVEL",
        "info",
        "least severe level logged",
        _LEVELS,
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
    redis_key: str = DEFAULTS["redis_key"]
    api_key: str | None = None
    api_key_file: str = DEFAULTS["api_key_file"]
    insecure_no_api_key: bool = DEFAULTS["insecure_no_api_key"]
    fetch_interval: float = DEFAULTS["fetch_interval"]
    test_interval: float = DEFAULTS["test_interval"]
    test_url: str | None = DEFAULTS["test_url"]
    test_statuses: frozenset[int] = DEFAULTS["test_statuses"]
    test_concurrency: int = DEFAULTS["test_concurrency"]
    test_timeout: float = DEFAULTS["test_timeout"]
    anonymity_check: bool = DEFAULTS["anonymity_check"]
    anonymity_url: str | None = DEFAULTS["anonymity_url"]
    score_step: int = DEFAULTS["score_step"]
    report_step: int = DEFAULTS["report_step"]
    max_size: int = DEFAULTS["max_size"]
    max_count: int = DEFAULTS["max_count"]
    proxies: tuple[str, ...] = DEFAULTS["proxies"]
    proxies_file: str | None = DEFAULTS["proxies_file"]
    source_urls: tuple[str, ...] = DEFAULTS["source_urls"]
    source_plugins: tuple[str, ...] = DEFAULTS["source_plugins"]
    source_timeout: float = DEFAULTS["source_timeout"]
    fetch_loop: bool = DEFAULTS["fetch_loop"]
    test_loop: bool = DEFAULTS["test_loop"]
    log_format: str = DEFAULTS["log_format"]
    log_level: str = DEFAULTS["log_level"]
    once: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option's flag to ``parser`` (values stay strings; ``resolve`` checks them)."""
    options.add_arguments(parser, OPTIONS)


def resolve(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Settings:
    """Build ``Settings`` from parsed flags and the environment, checking every value."""
    values = options.resolve(OPTIONS, args, env)
    options.check_tls(values, "PROXYPOOL")
    values["once"] = bool(getattr(args, "once", False))
    values["api_key"] = api_key(
        KEY_NAMES, values["api_key"], values["host"], values["insecure_no_api_key"]
    )
    return Settings(**values)


def require_test_url(settings: Settings) -> None:
    """The tester has no sensible default target: the operator names the site proxies must reach."""
    if settings.test_url is None:
        raise ConfigError(
            "the test loop needs --test-url / PROXYPOOL_TEST_URL (the site proxies must reach), "
            "or --no-test"
        )


def describe(settings: Settings) -> dict[str, Any]:
    """Settings for the start-up log line, with secrets masked."""
    shown = options.shown(OPTIONS, {f.name: getattr(settings, f.name) for f in fields(settings)})
    shown["proxies"] = len(settings.proxies)
    return shown
