"""`crawlfleet demosite` / `crawlfleet-demosite`: run the demo target site under uvicorn.

Every flag has an environment equivalent (``DEMOSITE_<FLAG>``); flags win over the environment.
Numbers are read strictly (integers are digits only) and bounded (``config.LIMITS``, at most
64 workers); a bad value is one line on stderr and exit status 2, as for every hub service.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import secrets
import sys
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from crawlfleet.demosite.config import CONFIG_ENV, ConfigError, SiteConfig, parse_accounts
from crawlfleet.service.http import server_options
from crawlfleet.service.options import EXIT_CONFIG, EXIT_OK

PROG = "crawlfleet demosite"
MAX_WORKERS = 64
LOG_LEVELS = ("debug", "info", "warning", "error")
_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")
LOG_FORMAT = "ts=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s"


# dest -> (flag, how its string becomes a value), filled by ``build_parser``
KINDS: dict[str, tuple[str, Callable[[str], Any]]] = {}


def _int(raw: str) -> int:
    if not _INTEGER.fullmatch(raw.strip()):
        raise ValueError("must be an integer")
    return int(raw)


def _float(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def typed(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with every value read by its kind; ``ConfigError`` (one line) on a bad one."""
    values = vars(args).copy()
    for dest, (flag, kind) in KINDS.items():
        raw = values[dest]
        try:
            values[dest] = kind(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            reason = str(exc) if kind is _int else "must be a number"
            raise ConfigError(f"{flag} {reason}, got {str(raw)[:40]!r}") from None
    return argparse.Namespace(**values)


def _env(name: str, default: str) -> str:
    return os.environ.get(f"DEMOSITE_{name}", default)


def build_parser() -> argparse.ArgumentParser:
    d = SiteConfig.__dataclass_fields__
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Demo book catalogue with JWT login and per-IP bans (the crawl's target).",
    )

    def add(flag: str, kind: Callable[[str], Any], default: object, help_text: str) -> None:
        env = flag.lstrip("-").replace("-", "_").upper()
        # Kept as strings here; ``typed`` reads them, so a bad value is one line naming the flag.
        KINDS[flag.lstrip("-").replace("-", "_")] = (flag, kind)
        p.add_argument(
            flag,
            default=_env(env, str(default)),
            help=f"{help_text} (env DEMOSITE_{env}; default {default})",
        )

    add("--host", str, "127.0.0.1", "address to listen on")
    add("--port", _int, 8000, "port to listen on")
    add("--books", _int, d["books"].default, "number of books in the catalogue (at most 1000000)")
    add("--page-size", _int, d["page_size"].default, "default `limit` of the list API")
    add("--seed", _int, d["seed"].default, "catalogue seed (same seed, same books)")
    add("--accounts", str, "admin:admin", "user:pass,... or @FILE with one user:pass a line")
    add("--token-ttl", _float, d["token_ttl"].default, "token lifetime in seconds")
    add("--jwt-secret", str, "", "HS256 signing secret, >= 32 bytes (empty: random per start)")
    add("--admin-secret", str, "", "enables /api/admin/* with header X-Admin-Secret")
    add(
        "--rate-limit",
        _int,
        d["rate_limit"].default,
        "API requests allowed per window per client address (0 = no limit)",
    )
    add("--rate-window", _float, d["rate_window"].default, "rate-limit window in seconds")
    add("--ban-seconds", _float, d["ban_seconds"].default, "how long a busy address stays banned")
    add("--ban-status", _int, d["ban_status"].default, "HTTP status of a ban: 403 or 429")
    add("--latency-ms", _float, d["latency_ms"].default, "extra delay added to every response")
    add("--workers", _int, 1, "uvicorn worker processes (state such as bans is per worker)")
    add("--log-level", str, "info", "debug, info, warning, error")
    p.add_argument(
        "--access-log",
        action="store_true",
        default=_env("ACCESS_LOG", "") in ("1", "true", "yes"),
        help="log every request (env DEMOSITE_ACCESS_LOG=1)",
    )
    return p


def config_from_args(args: argparse.Namespace) -> SiteConfig:
    return SiteConfig(
        books=args.books,
        page_size=args.page_size,
        seed=args.seed,
        accounts=parse_accounts(args.accounts),
        token_ttl=args.token_ttl,
        jwt_secret=args.jwt_secret or secrets.token_urlsafe(32),
        admin_secret=args.admin_secret,
        rate_limit=args.rate_limit,
        rate_window=args.rate_window,
        ban_seconds=args.ban_seconds,
        ban_status=args.ban_status,
        latency_ms=args.latency_ms,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = typed(parser.parse_args(list(sys.argv[1:] if argv is None else argv)))
        config = config_from_args(args)
        if not 0 < args.port < 65536:
            raise ConfigError(f"--port must be 1..65535, got {args.port}")
        if not 1 <= args.workers <= MAX_WORKERS:
            raise ConfigError(f"--workers must be >= 1 and <= {MAX_WORKERS}, got {args.workers}")
        if args.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}")
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("crawlfleet.demosite").info(
        "event=start host=%s port=%s books=%d accounts=%d rate_limit=%d/%ss workers=%d",
        args.host,
        args.port,
        config.books,
        len(config.accounts),
        config.rate_limit,
        config.rate_window,
        args.workers,
    )
    # Workers are separate processes: they rebuild the app from the same config (and secret).
    os.environ[CONFIG_ENV] = config.to_json()
    uvicorn.run(
        "crawlfleet.demosite.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_config=None,
        log_level=args.log_level.lower(),
        access_log=args.access_log,
        # The client address is the TCP peer: a proxy in front must not be able to spoof it.
        proxy_headers=False,
        server_header=False,
        **server_options(),
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
