"""`crawlfleet purge SPIDER`: delete every key of a crawl, after asking (``--yes`` skips asking).

Keys are found with ``SCAN MATCH <spider>:*`` (never ``KEYS``) and removed with ``UNLINK`` in
batches, but ``<spider>:politeness:*``: what the sites' limits taught the politeness budget
outlives the crawl (``POLITENESS_MEMORY``; ``crawlfleet politeness SPIDER --reset`` forgets it),
as it does for a crawl whose ``POLITENESS_NAMESPACE`` is another name. A crawl with live
workers is refused unless ``--force`` (they would write it again).
A Bloom filter configured outside the ``<spider>:`` prefix (``BLOOMFILTER_KEY``) is not touched.
Keys of any type are deleted; a ``<spider>:workers`` key that is not a sorted set (so live workers
cannot be counted) is named and needs ``--force``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import redis

from crawlfleet.commands.opsargs import add_redis_arg, check_spider, connect, run_guarded
from crawlfleet.frontier.shards import crawl_shards
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.hub.urls import mask_url

SCAN_COUNT = 1000
BATCH = 500


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("purge", help="delete every Redis key of a crawl (asks first)")
    p.add_argument("spider", help="spider name (deletes SPIDER:*)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--force", action="store_true", help="purge even while workers are alive")
    add_redis_arg(p)
    p.set_defaults(run=run)


def spider_keys(client: redis.Redis, spider: str, shards: int = 1) -> tuple[list[bytes], int]:
    """Every key of the crawl, in each of its ``shards`` (its shard record among them), but
    its politeness keys; and how many of those there are (what the sites taught, kept)."""
    home = SpiderKeys.for_client(spider, client)
    kept = home.politeness_prefix.encode()
    found = [
        key
        for keys in home.of_shards(shards)
        for key in client.scan_iter(match=keys.glob, count=SCAN_COUNT)
    ]
    crawl = [key for key in found if not key.startswith(kept)]
    return crawl, len(found) - len(crawl)


def _kept(spider: str, count: int) -> str:
    """What purge says of the ``count`` politeness keys it kept (said only when there are some)."""
    return (
        f"{count} politeness key(s) kept: what the sites taught the budget "
        f"(crawlfleet politeness {spider} --reset forgets it)"
    )


def _alive(client: redis.Redis, spider: str, where: str, force: bool) -> int:
    """Live workers of ``spider`` (0 with ``--force`` when the workers key has a wrong type)."""
    key = SpiderKeys.for_client(spider, client).workers
    raw_kind = client.type(key)
    kind = raw_kind.decode() if isinstance(raw_kind, bytes) else str(raw_kind)
    if kind not in ("zset", "none"):
        if force:
            return 0
        raise RuntimeError(
            f"{key} at {where} is a {kind}, not a sorted set: live workers cannot be "
            f"counted; pass --force to delete it with the rest"
        )
    now_s, now_us = client.time()
    return int(client.zcount(key, now_s * 1000 + now_us // 1000, "+inf"))


def _confirm(question: str) -> bool:
    print(question + " [y/N] ", end="", flush=True, file=sys.stderr)
    try:
        answer = input()
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _run(args: argparse.Namespace) -> int:
    check_spider(args.spider)
    client = connect(args.redis_url)
    where = mask_url(args.redis_url)
    shards = len(crawl_shards(client, args.spider))
    keys, kept = spider_keys(client, args.spider, shards)
    if not keys:
        also = f"; {_kept(args.spider, kept)}" if kept else ""
        raise LookupError(f"no keys of spider {args.spider!r} at {where} (nothing to purge{also})")
    alive = _alive(client, args.spider, where, args.force)
    if alive and not args.force:
        raise RuntimeError(
            f"{alive} worker(s) of {args.spider} are alive at {where}; stop them first "
            f"(or pass --force)"
        )
    if not args.yes and not _confirm(
        f"Delete {len(keys)} key(s) of spider {args.spider!r} at {where} "
        f"(queue, fingerprints, items, stats; not what its politeness keys learned)?"
    ):
        print(f"crawlfleet purge: aborted; nothing deleted from {where}", file=sys.stderr)
        return 1
    removed = 0
    for i in range(0, len(keys), BATCH):
        removed += int(client.unlink(*keys[i : i + BATCH]))
    # Keys written while we were asking (a late worker) are caught by a second pass.
    late, kept = spider_keys(client, args.spider, shards)
    if late:
        removed += int(client.unlink(*late))
    print(f"removed {removed} key(s) of {args.spider} from {where}")
    if kept:
        print(_kept(args.spider, kept))
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("purge", _run, args)
