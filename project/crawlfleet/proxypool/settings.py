"""Proxy pool settings: one table of options, each settable by a flag or a ``PROXYPOOL_*`` variable.

A flag wins over the environment, the environment over the default. Every value is checked
here, before anything starts, and a bad one raises ``ConfigError`` with a one-line message
that names both the flag and the variable. The API key is the exception: it never comes from
a flag (``ps`` would show it) but from ``PROXYPOOL_API_KEY`` or the file named by
``--api-key-file`` / ``PROXYPOOL_API_KEY_FILE``; ``--api-key`` is refused with one line.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from crawlfleet.proxypool.proxies import ProxyFormatError, mask_proxy, parse_proxy
from crawlfleet.redisconn import mask_url, url_problem
from crawlfleet.service.options import ConfigError, parse_http_url, parse_int
from crawlfleet.service.secrets import ApiKeyNames, api_key

__all__ = ["OPTIONS", "ConfigError", "Settings", "add_arguments", "describe", "resolve"]
KEY_NAMES = ApiKeyNames("PROXYPOOL")


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 5555
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_key: str = "proxypool:proxies"
    api_key: str | None = None
    api_key_file: str | None = None
    insecure_no_api_key: bool = False
    fetch_interval: float = 300.0
    test_interval: float = 60.0
    test_url: str | None = None
    test_statuses: frozenset[int] = frozenset({200})
    test_concurrency: int = 50
    test_timeout: float = 10.0
    anonymity_check: bool = False
    anonymity_url: str | None = None
    score_step: int = 10
    report_step: int = 10
    max_size: int = 20_000
    max_count: int = 100
    proxies: tuple[str, ...] = ()
    proxies_file: str | None = None
    source_urls: tuple[str, ...] = ()
    source_plugins: tuple[str, ...] = ()
    source_timeout: float = 15.0
    fetch_loop: bool = True
    test_loop: bool = True
    log_format: str = "kv"
    log_level: str = "info"
    once: bool = False


# ---- value parsers: each raises ValueError with the reason (the caller adds flag and variable)


def _int(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        return parse_int(raw, low, high)

    return parse


def _seconds(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("must be a number of seconds greater than 0") from None
    if not 0 < value <= 86_400:  # also rejects nan
        raise ValueError("must be a number of seconds greater than 0 and at most 86400")
    return value


def _http_url(raw: str) -> str:
    return parse_http_url(raw)


def _redis_url(raw: str) -> str:
    value = raw.strip()
    problem = url_problem(value)
    if problem is not None:
        raise ValueError(problem)
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


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false (1/0, yes/no, on/off)")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


def _text(raw: str) -> str:
    value = raw.strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def _list(
    item: Callable[[str], str], show: Callable[[str], str]
) -> Callable[[str], tuple[str, ...]]:
    def parse(raw: str) -> tuple[str, ...]:
        values = []
        for part in re.split(r"[,\s]+", raw.strip()):
            if part:
                try:
                    values.append(item(part))
                except ValueError as exc:
                    raise ValueError(f"item {show(part)!r} {exc}") from None
        return tuple(values)

    return parse


def _proxy(raw: str) -> str:
    try:
        return parse_proxy(raw)
    except ProxyFormatError as exc:
        raise ValueError(f"is not a proxy: {exc}") from None


def safe_url(url: str) -> str:
    """``url`` fit for a log: password masked, query string dropped (provider URLs carry keys)."""
    return mask_url(url.split("?", 1)[0])


@dataclass(frozen=True)
class Option:
    """One setting: its flag, its environment variable and how a string becomes its value."""

    name: str
    flag: str
    env: str
    parse: Callable[[str], Any]
    help: str
    # value | list (flag repeatable) | switch (flag sets True) | negswitch | secret (no flag)
    kind: str = "value"
    show: Callable[[str], str] = str  # how a bad raw value appears in the error (secrets masked)


OPTIONS: tuple[Option, ...] = (
    Option("host", "--host", "PROXYPOOL_HOST", _text, "address the HTTP API listens on"),
    Option("port", "--port", "PROXYPOOL_PORT", _int(1, 65535), "port of the HTTP API"),
    Option(
        "redis_url", "--redis-url", "REDIS_URL", _redis_url, "Redis holding the pool", show=mask_url
    ),
    Option(
        "redis_key",
        "--redis-key",
        "PROXYPOOL_REDIS_KEY",
        _text,
        "sorted set of proxies (statistics go to <key>:stats)",
    ),
    Option(
        "api_key",
        "--api-key",
        "PROXYPOOL_API_KEY",
        _text,
        "key clients send in the X-API-Key header, at least 16 characters (environment only)",
        kind="secret",
    ),
    Option(
        "api_key_file",
        "--api-key-file",
        "PROXYPOOL_API_KEY_FILE",
        _text,
        "file holding the API key (instead of PROXYPOOL_API_KEY)",
    ),
    Option(
        "insecure_no_api_key",
        "--insecure-no-api-key",
        "PROXYPOOL_INSECURE_NO_API_KEY",
        _bool,
        "allow a non-loopback --host without an API key",
        kind="switch",
    ),
    Option(
        "fetch_interval",
        "--fetch-interval",
        "PROXYPOOL_FETCH_INTERVAL",
        _seconds,
        "seconds between two fetches of the sources",
    ),
    Option(
        "test_interval",
        "--test-interval",
        "PROXYPOOL_TEST_INTERVAL",
        _seconds,
        "seconds between two test rounds",
    ),
    Option(
        "test_url",
        "--test-url",
        "PROXYPOOL_TEST_URL",
        _http_url,
        "URL fetched through each proxy to test it (your target site)",
    ),
    Option(
        "test_statuses",
        "--test-status",
        "PROXYPOOL_TEST_STATUS",
        _statuses,
        "HTTP statuses that count as a pass, e.g. 200,301-302",
    ),
    Option(
        "test_concurrency",
        "--test-concurrency",
        "PROXYPOOL_TEST_CONCURRENCY",
        _int(1, 10_000),
        "proxies tested at the same time",
    ),
    Option(
        "test_timeout",
        "--test-timeout",
        "PROXYPOOL_TEST_TIMEOUT",
        _seconds,
        "seconds allowed for one proxy's test",
    ),
    Option(
        "anonymity_check",
        "--anonymity-check",
        "PROXYPOOL_ANONYMITY_CHECK",
        _bool,
        "fail proxies that reveal the tester's own address",
        kind="switch",
    ),
    Option(
        "anonymity_url",
        "--anonymity-url",
        "PROXYPOOL_ANONYMITY_URL",
        _http_url,
        "URL that echoes the caller's address (default: the test URL)",
    ),
    Option(
        "score_step",
        "--score-step",
        "PROXYPOOL_SCORE_STEP",
        _int(1, 100),
        "points a proxy loses per failed test",
    ),
    Option(
        "report_step",
        "--report-step",
        "PROXYPOOL_REPORT_STEP",
        _int(1, 100),
        "points a proxy loses per POST /report with reason=failed",
    ),
    Option(
        "max_size",
        "--max-size",
        "PROXYPOOL_MAX_SIZE",
        _int(1, 10_000_000),
        "most proxies kept; new ones are refused when full",
    ),
    Option(
        "max_count",
        "--max-count",
        "PROXYPOOL_MAX_COUNT",
        _int(1, 10_000),
        "largest N accepted by GET /random?count=N",
    ),
    Option(
        "proxies",
        "--proxy",
        "PROXYPOOL_PROXIES",
        _list(_proxy, mask_proxy),
        "static proxies (repeat the flag; comma or space separated in the variable)",
        kind="list",
    ),
    Option(
        "proxies_file",
        "--proxies-file",
        "PROXYPOOL_PROXIES_FILE",
        _text,
        "file with one proxy per line, re-read at every fetch",
    ),
    Option(
        "source_urls",
        "--source-url",
        "PROXYPOOL_SOURCE_URLS",
        _list(_http_url, safe_url),
        "URLs answering host:port lines (repeat the flag; comma or space separated)",
        kind="list",
    ),
    Option(
        "source_plugins",
        "--source-plugin",
        "PROXYPOOL_SOURCE_PLUGINS",
        _list(_text, str),
        "entry points of group crawlfleet.proxypool.sources to use",
        kind="list",
    ),
    Option(
        "source_timeout",
        "--source-timeout",
        "PROXYPOOL_SOURCE_TIMEOUT",
        _seconds,
        "seconds allowed for one source URL or plug-in",
    ),
    Option(
        "fetch_loop",
        "--no-fetch",
        "PROXYPOOL_FETCH_LOOP",
        _bool,
        "serve: do not run the fetch loop in this process",
        kind="negswitch",
    ),
    Option(
        "test_loop",
        "--no-test",
        "PROXYPOOL_TEST_LOOP",
        _bool,
        "serve: do not run the test loop in this process",
        kind="negswitch",
    ),
    Option(
        "log_format",
        "--log-format",
        "PROXYPOOL_LOG_FORMAT",
        _choice("kv", "json"),
        "log lines as key=value pairs or JSON objects",
    ),
    Option(
        "log_level",
        "--log-level",
        "PROXYPOOL_LOG_LEVEL",
        _choice("debug", "info", "warning", "error"),
        "least severe level logged",
    ),
)

_DEFAULTS = {f.name: f.default for f in fields(Settings)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every option's flag to ``parser`` (values stay strings; ``resolve`` checks them)."""
    for opt in OPTIONS:
        default = _DEFAULTS[opt.name]
        shown = ",".join(map(str, sorted(default))) if isinstance(default, frozenset) else default
        help_text = f"{opt.help} [env {opt.env}; default {shown}]"
        if opt.kind == "secret":
            # Accepted by the parser only to refuse it with one clear line (see ``_value``).
            parser.add_argument(opt.flag, dest=opt.name, help=argparse.SUPPRESS)
        elif opt.kind in ("switch", "negswitch"):
            parser.add_argument(
                opt.flag, dest=opt.name, action="store_true", default=None, help=help_text
            )
        elif opt.kind == "list":
            parser.add_argument(
                opt.flag, dest=opt.name, action="append", metavar="VALUE", help=help_text
            )
        else:
            parser.add_argument(opt.flag, dest=opt.name, metavar="VALUE", help=help_text)


def _value(opt: Option, flag_value: Any, env: Mapping[str, str]) -> Any:
    if opt.kind == "secret":
        if flag_value is not None:
            raise ConfigError(
                f"{opt.flag} is refused: a flag shows the key to every user in ps; set "
                f"{opt.env} or --api-key-file / {opt.env}_FILE"
            )
        return None  # read by ``resolve`` with the file option, under the key rules
    if opt.kind == "switch" and flag_value:
        return True
    if opt.kind == "negswitch" and flag_value:
        return False
    if opt.kind == "list" and flag_value:
        source, raw = opt.flag, ",".join(flag_value)
    elif opt.kind == "value" and flag_value is not None:
        source, raw = opt.flag, flag_value
    elif opt.env in env:
        source, raw = opt.env, env[opt.env]
    else:
        return _DEFAULTS[opt.name]
    try:
        return opt.parse(raw)
    except ValueError as exc:
        elsewhere = opt.env if source == opt.flag else opt.flag
        shown = "" if opt.kind == "list" else f"{opt.show(raw)!r} "
        raise ConfigError(f"bad {source} (or {elsewhere}): {shown}{exc}") from None


def resolve(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Settings:
    """Build ``Settings`` from parsed flags and the environment, checking every value."""
    environ = os.environ if env is None else env
    values = {opt.name: _value(opt, getattr(args, opt.name, None), environ) for opt in OPTIONS}
    values["once"] = bool(getattr(args, "once", False))
    values["api_key"] = api_key(
        KEY_NAMES,
        values["api_key_file"] or "",
        environ,
        values["host"],
        values["insecure_no_api_key"],
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
    shown: dict[str, Any] = {}
    for opt in OPTIONS:
        value = getattr(settings, opt.name)
        if opt.name == "api_key":
            value = "***" if value else None
        elif opt.name == "redis_url":
            value = mask_url(value)
        elif opt.name == "proxies":
            value = len(value)
        elif opt.name == "source_urls":
            value = [safe_url(u) for u in value]
        elif isinstance(value, frozenset):
            value = ",".join(map(str, sorted(value)))
        shown[opt.name] = value
    return shown
