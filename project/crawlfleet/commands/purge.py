"""`crawlfleet purge SPIDER`: delete every key of a crawl, after asking (``--yes`` skips asking).

Keys are found with ``SCAN MATCH <spider>:*`` (never ``KEYS``) and removed with ``UNLINK`` in
batches. A crawl with live workers is refused unless ``--force`` (they would write it again).
A Bloom filter configured outside the ``<spider>:`` prefix (``BLOOMFILTER_KEY``) is not touched.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import redis

from crawlfleet.clusterview import escape_glob
from crawlfleet.commands.opsargs import UsageError, add_redis_arg, connect, run_guarded
from crawlfleet.redisconn import mask_url

SCAN_COUNT = 1000
BATCH = 500


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("purge", help="delete every Redis key of a crawl (asks first)")
    p.add_argument("spider", help="spider name (deletes SPIDER:*)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--force", action="store_true", help="purge even while workers are alive")
    add_redis_arg(p)
    p.set_defaults(run=run)


def spider_keys(client: redis.Redis, spider: str) -> list[bytes]:
    return list(client.scan_iter(match=f"{escape_glob(spider)}:*", count=SCAN_COUNT))


def _confirm(question: str) -> bool:
    print(question + " [y/N] ", end="", flush=True, file=sys.stderr)
    try:
        answer = input()
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _run(args: argparse.Namespace) -> int:
    if not args.spider or "*" in args.spider:
        raise UsageError(f"not a spider name: {args.spider!r}")
    client = connect(args.redis_url)
    where = mask_url(args.redis_url)
    keys = spider_keys(client, args.spider)
    if not keys:
        raise LookupError(f"no keys of spider {args.spider!r} at {where} (nothing to purge)")
    now_s, now_us = client.time()
    alive = int(client.zcount(f"{args.spider}:workers", now_s * 1000 + now_us // 1000, "+inf"))
    if alive and not args.force:
        raise RuntimeError(
            f"{alive} worker(s) of {args.spider} are alive at {where}; stop them first "
            f"(or pass --force)"
        )
    if not args.yes and not _confirm(
        f"Delete {len(keys)} key(s) of spider {args.spider!r} at {where} "
        f"(queue, fingerprints, items, stats)?"
    ):
        print(f"crawlfleet purge: aborted; nothing deleted from {where}", file=sys.stderr)
        return 1
    removed = 0
    for i in range(0, len(keys), BATCH):
        removed += int(client.unlink(*keys[i : i + BATCH]))
    # Keys written while we were asking (a late worker) are caught by a second pass.
    late = spider_keys(client, args.spider)
    if late:
        removed += int(client.unlink(*late))
    print(f"removed {removed} key(s) of {args.spider} from {where}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("purge", _run, args)
