"""`crawlfleet politeness SPIDER`: what the crawl's politeness keys learned, from the hub.

Each (site, proxy) key learns the site's limit by itself (docs/reference/settings.md,
Politeness); the hub keeps what it learned for ``POLITENESS_MEMORY``, and the next crawl of the
site starts from it. This command lists every key (phase, rate now, learned rate, ceiling, what
changed it last and when), ``--json`` prints them as one JSON object, ``-o FILE`` exports them
as JSON lines, and ``--reset`` forgets them (``--site SITE``: that site's keys only; asks first,
``--yes`` does not). The namespace is the one the spider's workers recorded
(``POLITENESS_NAMESPACE``), else the spider's name; ``--namespace`` names another.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from crawlfleet.commands.opsargs import REDIS_PARAMS, UsageError, check_spider, run_guarded
from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.politeness.memory import forget, learned_keys, namespace_of


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "politeness", help="the rates a crawl's politeness keys learned: show, export, reset"
    )
    p.add_argument("spider", help="spider name")
    p.add_argument("--namespace", help="politeness namespace (default: the crawl's own)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("-o", "--output", help="export every key as JSON lines to this file")
    p.add_argument("--reset", action="store_true", help="forget what the keys learned")
    p.add_argument("--site", help="with --reset: only this site's keys")
    p.add_argument("-y", "--yes", action="store_true", help="with --reset: do not ask")
    p.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", ""), help="hub Redis URL (env REDIS_URL)"
    )
    p.set_defaults(run=run)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _age(at: float | None) -> str:
    if at is None:
        return "-"
    seconds = max(time.time() - at, 0.0)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def format_rows(rows: list[dict[str, Any]]) -> str:
    header = ("site", "proxy", "phase", "rate/s", "learned/s", "ceiling/s", "bans", "why", "when")
    table = [header] + [
        (
            r["site"],
            r["proxy"] or "-",
            r["phase"],
            _rate(r["rate"]),
            _rate(r["learned"]),
            _rate(r["ceiling"]),
            str(r["bans"]),
            r["why"],
            _age(r["learned_at"]),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


def _confirm(prompt: str) -> bool:
    if not sys.stdin.isatty():
        return False
    return input(f"{prompt} [y/N] ").strip().lower() in ("y", "yes")


def _run(args: argparse.Namespace) -> int:
    check_spider(args.spider)
    if args.namespace is not None:
        check_spider(args.namespace)
    if args.site is not None and not args.reset:
        raise UsageError("--site goes with --reset")
    if args.site is not None and (not args.site.strip() or any(c in args.site for c in " /@")):
        raise UsageError(f"--site: not a host name: {args.site[:80]!r}")
    if args.reset and (args.json or args.output):
        raise UsageError("--reset does not go with --json or --output")
    client = get_redis(args.redis_url, **REDIS_PARAMS)
    check_connection(client, args.redis_url)
    namespace = args.namespace or namespace_of(client, args.spider)
    if args.reset:
        what = f"the keys of {args.site}" if args.site else "every key"
        if not args.yes and not _confirm(f"forget what {what} of namespace {namespace!r} learned?"):
            print("not reset (pass --yes to reset without asking)", file=sys.stderr)
            return 1
        print(f"forgot {forget(client, namespace, args.site)} keys of namespace {namespace!r}")
        return 0
    rows, warnings = learned_keys(client, namespace)
    if args.output:
        path = Path(args.output)
        try:
            with path.open("w", encoding="utf-8") as out:
                for r in rows:
                    out.write(json.dumps(r, sort_keys=True) + "\n")
        except OSError as exc:
            raise UsageError(f"-o: cannot write {str(path)[:200]!r}: {exc.strerror}") from None
        print(f"exported {len(rows)} keys of namespace {namespace!r} to {path}")
    elif args.json:
        print(json.dumps({"namespace": namespace, "keys": rows, "warnings": warnings}))
    elif rows:
        print(format_rows(rows))
    else:
        print(f"no politeness keys in namespace {namespace!r}")
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("politeness", _run, args)
