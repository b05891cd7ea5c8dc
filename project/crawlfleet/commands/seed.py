"""`crawlfleet seed SPIDER URL…`: add start URLs to a crawl (arguments, a file, or stdin).

Entries go to the spider's start-URL key (``<spider>:start_urls`` unless the workers recorded
another in ``<spider>:frontier``), which running workers consume while crawling. An entry is a
plain ``http(s)://`` URL or a JSON object ``{"url": …, "meta", "method", "body", "headers",
"priority", "dont_filter", "callback"}`` (README, frontier section). Every entry is checked
before anything is written: one malformed line stops the command (status 2) with its line number,
and nothing is added.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawlfleet import clusterview
from crawlfleet.commands.opsargs import UsageError, add_redis_arg, connect, run_guarded
from crawlfleet.redisconn import mask_url

CHUNK = 1000


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("seed", help="add start URLs to a crawl (arguments, file or stdin)")
    p.add_argument("spider", help="spider name")
    p.add_argument("urls", nargs="*", metavar="URL", help="URLs or JSON objects to add")
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
    add_redis_arg(p)
    p.set_defaults(run=run)


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be a start URL, or None when it can."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http:// or https:// URL with a host"
    if any(c.isspace() for c in url):
        return "a URL must not contain spaces"
    return None


def check_entry(text: str) -> str:
    """The entry to store for one line (a URL or a JSON object); raises ValueError with why not."""
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"invalid JSON ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise ValueError('a JSON entry must be an object with a "url" string')
        problem = check_url(data["url"])
        if problem:
            raise ValueError(f'"url" {data["url"]!r} is {problem}')
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    problem = check_url(text)
    if problem:
        raise ValueError(f"{text[:200]!r} is {problem}")
    return text


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
                raise UsageError(f"cannot read {name}: {exc}") from None
        for number, line in enumerate(source, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                yield f"{label} line {number}", text


def _decode(raw: Any) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


def _run(args: argparse.Namespace) -> int:
    entries: list[str] = []
    for where, text in _lines(args):
        try:
            entries.append(check_entry(text))
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}; nothing was added") from None
    if not entries:
        raise UsageError("no URLs given: pass URLs, --file FILE or --file - (stdin)")
    client = connect(args.redis_url)
    if not args.new:
        clusterview.require_spider(client, args.spider, args.redis_url)
    meta = _decode(client.hgetall(f"{args.spider}:frontier"))
    key = meta.get("start_urls_key") or f"{args.spider}:start_urls"
    as_set = meta.get("start_urls_as_set") == "1"
    pipe = client.pipeline(transaction=True)
    for i in range(0, len(entries), CHUNK):
        chunk = entries[i : i + CHUNK]
        if as_set:
            pipe.sadd(key, *chunk)
        else:
            pipe.rpush(key, *chunk)
    pipe.execute()
    kind = "set" if as_set else "list"
    print(f"added {len(entries)} start URL(s) to {key} ({kind}) at {mask_url(args.redis_url)}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("seed", _run, args)
