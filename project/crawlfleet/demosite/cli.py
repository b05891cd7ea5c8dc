"""`crawlfleet demosite` / `crawlfleet-demosite`: run the demo target site under uvicorn.

Every flag has an environment equivalent (``DEMOSITE_<FLAG>``); flags win over the environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from crawlfleet.demosite.config import CONFIG_ENV, ConfigError, SiteConfig, parse_accounts

LOG_FORMAT = "ts=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s"


def _env(name: str, default: str) -> str:
    return os.environ.get(f"DEMOSITE_{name}", default)


def build_parser() -> argparse.ArgumentParser:
    d = SiteConfig.__dataclass_fields__
    p = argparse.ArgumentParser(
        prog="crawlfleet demosite",
        description="Demo book catalogue with JWT login and per-IP bans (the crawl's target).",
    )

    def add(flag: str, kind: Callable[[str], Any], default: object, help_text: str) -> None:
        env = flag.lstrip("-").replace("-", "_").upper()
        p.add_argument(
            flag,
            type=kind,
            default=_env(env, str(default)),
            help=f"{help_text} (env DEMOSITE_{env}; default {default})",
        )

    add("--host", str, "127.0.0.1", "address to listen on")
    add("--port", int, 8000, "port to listen on")
    add("--books", int, d["books"].default, "number of books in the catalogue")
    add("--page-size", int, d["page_size"].default, "default `limit` of the list API")
    add("--seed", int, d["seed"].default, "catalogue seed (same seed, same books)")
    add("--accounts", str, "admin:admin", "user:pass,... or @FILE with one user:pass a line")
    add("--token-ttl", float, d["token_ttl"].default, "token lifetime in seconds")
    add("--jwt-secret", str, "", "HS256 signing secret, >= 32 bytes (empty: random per start)")
    add("--admin-secret", str, "", "enables /api/admin/* with header X-Admin-Secret")
    add(
        "--rate-limit",
        int,
        d["rate_limit"].default,
        "API requests allowed per window per client address (0 = no limit)",
    )
    add("--rate-window", float, d["rate_window"].default, "rate-limit window in seconds")
    add("--ban-seconds", float, d["ban_seconds"].default, "how long a busy address stays banned")
    add("--ban-status", int, d["ban_status"].default, "HTTP status of a ban: 403 or 429")
    add("--latency-ms", float, d["latency_ms"].default, "extra delay added to every response")
    add("--workers", int, 1, "uvicorn worker processes (state such as bans is per worker)")
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
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))
    if not 0 < args.port < 65536:
        parser.error(f"--port must be 1..65535, got {args.port}")
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
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
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
