"""`crawlfleet export SPIDER -o FILE`: write the items collected on the hub to JSON lines or CSV.

Reads the stream ``SPIDER:items`` (written by ``crawlfleet.pipelines.RedisItemsPipeline``) in
chunks, keeps the first item of every id (at-least-once delivery can store a book twice), and
writes the file atomically (a temporary file renamed at the end). The format follows the file
name (``.jsonl``/``.json``/``.csv``) unless ``--format`` says otherwise. In CSV, a text cell
that a spreadsheet would run as a formula (it starts with ``= + - @``, a tab or a carriage
return) gets a leading ``'`` (OWASP's rule against CSV injection); JSON lines are written as is.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import redis
from rich.progress import Progress

from crawlfleet.commands.opsargs import check_spider, run_guarded
from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.keys import ITEMS_KEY
from crawlfleet.hub.urls import is_cluster_url, mask_url

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
# First characters that make a spreadsheet evaluate a CSV cell as a formula.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
CHUNK = 1000


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export", help="write a spider's items from the hub to a .jsonl or .csv file"
    )
    p.add_argument("spider", help="spider name (reads the stream SPIDER:items)")
    p.add_argument("-o", "--output", required=True, help="file to write (.jsonl or .csv)")
    p.add_argument("--format", choices=sorted(set(FORMATS.values())), help="override the format")
    p.add_argument("--key", default=ITEMS_KEY.default, help="stream key (default %(default)s)")
    p.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", ""), help="hub Redis URL (env REDIS_URL)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def _format_of(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    fmt = FORMATS.get(Path(args.output).suffix.lower())
    if fmt is None:
        raise ValueError(
            f"cannot tell the format of {args.output!r}: name it .jsonl or .csv, or pass --format"
        )
    return fmt


def _str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def iter_stream(client: redis.Redis, key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, item) for every entry, oldest first, CHUNK entries per round trip."""
    start = "-"
    while True:
        entries: Any = client.xrange(key, min=start, max="+", count=CHUNK)
        if not entries:
            return
        for entry_id, fields in entries:
            try:
                item = json.loads(fields[b"item"])
            except (KeyError, ValueError):
                item = None
            if not isinstance(item, dict):
                raise ValueError(f"stream {key} entry {_str(entry_id)} is not a JSON item")
            yield _str(fields.get(b"id")), item
        start = "(" + _str(entries[-1][0])


def _cell(value: Any) -> Any:
    """A CSV cell: lists and maps as JSON, formula-looking text defused with a leading quote."""
    if isinstance(value, list | dict):
        value = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


class _Writer:
    def __init__(self, out: TextIO, fmt: str) -> None:
        self.out = out
        self.fmt = fmt
        self.csv: csv.DictWriter[str] | None = None

    def write(self, item: dict[str, Any]) -> None:
        if self.fmt == "jsonl":
            self.out.write(json.dumps(item, ensure_ascii=False) + "\n")
            return
        if self.csv is None:
            # Columns: the first item's fields; later extra fields are dropped, missing ones empty.
            self.csv = csv.DictWriter(self.out, fieldnames=list(item), extrasaction="ignore")
            self.csv.writer.writerow([_cell(name) for name in item])
        self.csv.writerow({k: _cell(v) for k, v in item.items()})


def _run(args: argparse.Namespace) -> int:
    check_spider(args.spider)
    fmt = _format_of(args)
    if not args.redis_url:
        raise ValueError("no Redis URL: pass --redis-url or set REDIS_URL")
    client = get_redis(args.redis_url)
    check_connection(client, args.redis_url)
    tagged = is_cluster_url(args.redis_url)
    key = ITEMS_KEY.resolve(args.key, args.spider, ValueError, name="--key", tagged=tagged)
    if client.type(key) not in (b"stream", b"none"):
        raise ValueError(f"{key} at {mask_url(args.redis_url)} is not a stream")
    total = int(client.xlen(key))
    if total == 0:
        raise ValueError(f"no items: stream {key} at {mask_url(args.redis_url)} is empty")
    output = Path(args.output)
    seen: set[str] = set()
    written = duplicates = 0
    fd, tmp_name = tempfile.mkstemp(dir=output.parent or Path("."), prefix=f".{output.name}.")
    try:
        with (
            os.fdopen(fd, "w", encoding="utf-8", newline="") as out,
            Progress(disable=args.quiet, transient=True) as progress,
        ):
            task = progress.add_task(f"exporting {key}", total=total)
            writer = _Writer(out, fmt)
            for item_id, item in iter_stream(client, key):
                progress.advance(task)
                if item_id and item_id in seen:
                    duplicates += 1
                    continue
                seen.add(item_id)
                writer.write(item)
                written += 1
        os.replace(tmp_name, output)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    print(f"wrote {written} items to {output} ({duplicates} duplicates skipped, {total} read)")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("export", _run, args)
