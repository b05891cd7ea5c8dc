"""`crawlfleet demosite` / `crawlfleet-demosite`: run the demo target site under uvicorn.

Every flag has an environment equivalent (``DEMOSITE_<FLAG>``, the table ``OPTIONS``); flags
win over the environment. Numbers are read strictly (integers are digits only) and bounded
(``config.LIMITS``, at most 64 workers); a bad value is one line on stderr and exit status 2,
as for every hub service.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
import re
import secrets
import socket
import sys
from collections.abc import Sequence
from typing import Any

from uvicorn.supervisors import Multiprocess

from crawlfleet.demosite.app import create_app
from crawlfleet.demosite.config import CONFIG_ENV, SiteConfig, parse_accounts
from crawlfleet.service import logs, options, runtime
from crawlfleet.service.options import EXIT_OK, Option, boolean, choice, integer

PROG = "crawlfleet demosite"
MAX_WORKERS = 64
_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")
_DEFAULTS = SiteConfig(jwt_secret="x" * 32)
log = logging.getLogger("crawlfleet.demosite")


def _whole(raw: str) -> int:
    """An integer, digits only (its range is ``SiteConfig``'s)."""
    if not _INTEGER.fullmatch(raw.strip()):
        raise ValueError("must be an integer")
    return int(raw)


def _real(raw: str) -> float:
    """A finite number (its range is ``SiteConfig``'s)."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError("must be a number")
    return value


def _hidden(raw: str) -> str:
    return "***" if raw else ""


# name, default, parser, meaning; the flag is --name-with-dashes, the variable DEMOSITE_NAME.
_ROWS: tuple[tuple[str, Any, options.Parser, str], ...] = (
    ("books", _DEFAULTS.books, _whole, "number of books (at most 1000000)"),
    ("page_size", _DEFAULTS.page_size, _whole,
     f"default `limit` of the list API (the largest `limit` accepted is {_DEFAULTS.max_limit})"),
    ("seed", _DEFAULTS.seed, _whole,
     "catalogue seed: the same seed gives the same ids, order and fields"),
    ("accounts", "admin:admin", str, "`user:pass,user2:pass2`, or `@FILE` (or a file path) "
     "with one `user:pass` a line (`#` comments)"),
    ("token_ttl", _DEFAULTS.token_ttl, _real, "token lifetime in seconds (the JWT's `exp`)"),
    ("jwt_secret", "", str, "HS256 signing secret (at least 32 bytes; empty: random per "
     "start); set it to keep tokens valid across restarts"),
    ("admin_secret", "", str,
     "enables `/api/admin/*` with header `X-Admin-Secret` (empty: admin API off)"),
    ("rate_limit", _DEFAULTS.rate_limit, _whole, "API requests allowed per window per client "
     "address (0: off); one more bans the address"),
    ("rate_window", _DEFAULTS.rate_window, _real,
     "window of the rate limit, seconds (fixed windows)"),
    ("ban_seconds", _DEFAULTS.ban_seconds, _real, "how long a banned address stays banned"),
    ("ban_status", _DEFAULTS.ban_status, _whole,
     "status of a banned request: `403` or `429` (with `Retry-After`), or `200`: a ban page "
     "only its text reveals (no `Retry-After`)"),
    ("latency_ms", _DEFAULTS.latency_ms, _real, "delay added to every guarded response"),
    ("workers", 1, integer(1, MAX_WORKERS), "uvicorn worker processes; counters, bans and "
     "revocations are kept per worker, so they are exact only with 1"),
    ("log_level", "info", choice("debug", "info", "warning", "error"),
     "`debug`, `info`, `warning`, `error`; logs are `key=value` lines on stderr"),
    ("access_log", False, boolean, "log every request"),
)  # fmt: skip
SECRETS = ("accounts", "jwt_secret", "admin_secret")  # shown as *** in errors
OPTIONS: tuple[Option, ...] = (
    *options.listen_options("DEMOSITE", 8000, "address to listen on", "port to listen on"),
    *(
        Option(
            name,
            "--" + name.replace("_", "-"),
            "DEMOSITE_" + name.upper(),
            default,
            help_text,
            parse,
            kind="switch" if isinstance(default, bool) else "value",
            show=_hidden if name in SECRETS else str,
        )
        for name, default, parse, help_text in _ROWS
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Demo book catalogue with JWT login and per-IP bans (the crawl's target).",
    )
    options.add_arguments(parser, OPTIONS)
    return parser


def config_from_args(values: dict[str, Any]) -> SiteConfig:
    """The site's configuration from the resolved options (checked by ``SiteConfig``)."""
    same = {f.name: values[f.name] for f in dataclasses.fields(SiteConfig) if f.name in values}
    return SiteConfig(
        **{
            **same,
            "accounts": parse_accounts(values["accounts"]),
            "jwt_secret": values["jwt_secret"] or secrets.token_urlsafe(32),
        }
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))

    def work() -> int:
        values = options.resolve(OPTIONS, args)
        config = config_from_args(values)
        sock = runtime.bind(values["host"], values["port"], "--host/DEMOSITE_HOST")
        logs.setup("kv", values["log_level"])
        logs.event(
            log,
            "start",
            host=values["host"],
            port=values["port"],
            books=config.books,
            accounts=len(config.accounts),
            rate_limit=f"{config.rate_limit}/{config.rate_window:g}s",
            workers=values["workers"],
        )
        if values["workers"] == 1:
            return asyncio.run(_serve(config, sock, values["access_log"]))
        # Workers are separate processes: they rebuild the app from the same config (and
        # secret); uvicorn's supervisor stops them on SIGTERM/SIGINT.
        os.environ[CONFIG_ENV] = config.to_json()
        factory = runtime.uvicorn_config(
            "crawlfleet.demosite.app:app_from_env",
            factory=True,
            workers=values["workers"],
            access_log=values["access_log"],
        )
        Multiprocess(factory, sockets=[sock]).run()
        return EXIT_OK

    return runtime.run(PROG, work)


async def _serve(config: SiteConfig, sock: socket.socket, access_log: bool) -> int:
    stop = asyncio.Event()
    runtime.on_stop_signals(stop, log)
    status = await runtime.serve(create_app(config), sock, stop, access_log=access_log, log=log)
    logs.event(log, "stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
