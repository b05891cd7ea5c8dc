"""`crawlfleet seed SPIDER URL…`: add start URLs to a crawl (arguments, a file, or stdin).

Entries go to the spider's start-URL key (``<spider>:start_urls`` unless the workers recorded
another in ``<spider>:frontier``), which running workers consume while crawling
(``crawlfleet.jobs.seeding``, which the dashboard's seed form uses too; an active job of the
spider records it in its history). An entry is a plain ``http(s)://`` URL or a JSON object
``{"url": …, "meta", "method", "body", "headers", "priority", "dont_filter", "callback"}``
(docs/design.md, Start and finish). Every entry is checked before anything is written, by the
check a worker applies (``frontier.startfeed.start_entry``) with the URL schemes the workers
accept: ``--schemes``, default ``$SCHEDULER_URL_SCHEMES``, else http and https, as a worker reads
its ``SCHEDULER_URL_SCHEMES`` setting. One malformed line stops the command (status 2) with its
line number and a shortened, escaped quote of it, and nothing is added.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from scrapy.settings import Settings

from crawlfleet.commands import opsargs
from crawlfleet.frontier.config import DEFAULT_URL_SCHEMES, FrontierConfigError, url_schemes_setting
from crawlfleet.frontier.serialization import EntryPolicy, quote
from crawlfleet.hub.urls import mask_url
from crawlfleet.jobs import seeding, store
from crawlfleet.views.crawl import require_spider


def add_parser(subparsers: Any) -> None:
    p = opsargs.intermixed(
        subparsers.add_parser("seed", help="add start URLs to a crawl (arguments, file or stdin)")
    )
    p.add_argument("spider", help="spider name")
    p.add_argument("urls", nargs="*", default=[], metavar="URL", help="URLs or JSON objects to add")
    p.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        help="read entries from FILE, one a line ('-' = stdin; blank lines and # comments skipped)",
    )
    p.add_argument(
        "--new",
        action="store_true",
        help="allow a spider that has never run against this Redis (seed before the first start)",
    )
    p.add_argument(
        "--schemes",
        default=os.environ.get("SCHEDULER_URL_SCHEMES", ",".join(DEFAULT_URL_SCHEMES)),
        help="comma-separated URL schemes the workers accept, as their SCHEDULER_URL_SCHEMES "
        "(env SCHEDULER_URL_SCHEMES, default %(default)s)",
    )
    opsargs.add_redis_arg(p)
    p.set_defaults(run=run)


def policy_for(schemes: str) -> EntryPolicy:
    """The entry check of a worker whose ``SCHEDULER_URL_SCHEMES`` is ``schemes``."""
    try:
        allowed = url_schemes_setting(Settings({"SCHEDULER_URL_SCHEMES": schemes}))
    except FrontierConfigError as exc:
        raise opsargs.UsageError(f"--schemes: {exc}") from None
    return EntryPolicy(url_schemes=allowed)


def _lines(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """(where, text) for every entry: arguments first, then each file in order."""
    for i, url in enumerate(args.urls, 1):
        yield f"argument {i}", url.strip()
    for name in args.file:
        source: Iterable[str]
        if name == "-":
            source, label = sys.stdin, "stdin"
        else:
            try:
                source, label = Path(name).read_text(encoding="utf-8").splitlines(), name
            except (OSError, UnicodeDecodeError) as exc:
                raise opsargs.UsageError(f"cannot read {name}: {exc}") from None
        for number, line in enumerate(source, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                yield f"{label} line {number}", text


def _run(args: argparse.Namespace) -> int:
    opsargs.check_spider(args.spider)
    policy = policy_for(args.schemes)
    entries: list[str] = []
    for where, text in _lines(args):
        try:
            entries.append(seeding.check_entry(text, policy))
        except ValueError as exc:
            raise opsargs.UsageError(f"{where} {quote(text)}: {exc}; nothing was added") from None
    if not entries:
        raise opsargs.UsageError("no URLs given: pass URLs, --file FILE or --file - (stdin)")
    client = opsargs.connect(args.redis_url)
    if not args.new:
        require_spider(client, args.spider, args.redis_url)
    said = seeding.add_entries(client, args.spider, entries, store.who())
    print(f"{said} at {mask_url(args.redis_url)}")
    return 0


def run(args: argparse.Namespace) -> int:
    return opsargs.run_guarded("seed", _run, args)
