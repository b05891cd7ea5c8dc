"""`crawlfleet bloom-info SPIDER`: how full a spider's Bloom filter is, and how wrong it is now.

Reads the parameters the workers recorded in ``<key>:meta`` and counts the set bits of every
block (BITCOUNT), then prints size, k, capacity, the estimated number of fingerprints (from the
fill ratio), the fill ratio and the estimated current false-positive rate; it warns when the
filter is past its design load. ``--json`` prints the same as one JSON object. SPIDER is checked
as every operator command checks it (``opsargs.check_spider``): a bad name is one line, status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from crawlfleet.commands.opsargs import check_spider, run_guarded
from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import BloomConfigError
from crawlfleet.frontier.shards import crawl_shards
from crawlfleet.hub.connect import check_connection, get_redis
from crawlfleet.hub.keys import BLOOMFILTER_KEY
from crawlfleet.hub.urls import is_cluster_url


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bloom-info", help="size, fill and estimated error rate of a spider's Bloom filter"
    )
    p.add_argument("spider", help="spider name")
    p.add_argument(
        "--key",
        default=BLOOMFILTER_KEY.default,
        help="filter key or template (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--redis-url", default=os.environ.get("REDIS_URL", ""), help="hub Redis URL (env REDIS_URL)"
    )
    p.set_defaults(run=run)


def _human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{size} B"
        value /= 1024
    raise AssertionError("unreachable")


def format_info(info: dict[str, Any]) -> str:
    count = info["count_estimate"]
    key, hashes = info["key"], str(info["hashes"])
    if info["scalable"]:
        key = f"{key} (scalable: {info['layers']} of {info['max_layers']} layers)"
        hashes += " (newest layer)"
    elif info["blocks"] > 1:
        key = f"{key} ({info['blocks']} blocks)"
    rows = [
        ("key", key),
        ("size", f"{_human_bytes(info['size_bytes'])} ({info['bits']:,} bits)"),
        ("hashes (k)", hashes),
        ("capacity", f"{info['capacity']:,} at error rate {info['error_rate']:g}"),
        ("count (estimated)", "more than the filter can tell" if count is None else f"{count:,}"),
        ("fill ratio", f"{info['fill_ratio']:.4f}"),
        ("error rate now (est.)", f"{info['estimated_error_rate']:.3g}"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _run(args: argparse.Namespace) -> int:
    check_spider(args.spider)
    tagged = is_cluster_url(args.redis_url)
    BLOOMFILTER_KEY.resolve(args.key, args.spider, BloomConfigError, name="--key", tagged=tagged)
    # Short-lived: fail fast on an unreachable hub instead of hanging.
    client = get_redis(args.redis_url, socket_timeout=10, socket_connect_timeout=5)
    check_connection(client, args.redis_url)
    # a sharded crawl (SCHEDULER_SHARDS) has one filter per shard: each is shown
    n = len(crawl_shards(client, args.spider))
    infos = [
        BloomFilter.existing(
            client,
            BLOOMFILTER_KEY.resolve(
                args.key,
                args.spider,
                BloomConfigError,
                name="--key",
                tagged=tagged,
                shard=k,
                shards=n,
            ),
        ).info()
        for k in range(n)
    ]
    if args.json:
        print(json.dumps(infos[0] if n == 1 else {"shards": infos}))
    else:
        print("\n\n".join(format_info(info) for info in infos))
    for info in infos:
        if info["warning"]:
            print(f"warning: {info['warning']}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("bloom-info", _run, args)
