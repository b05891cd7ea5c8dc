"""`crawlfleet pause SPIDER` / `crawlfleet resume SPIDER`: hold a crawl without losing anything.

``pause`` sets ``<spider>:paused``; the frontier scheduler sees it in the cluster status of its
next round trip (at the latest after ``SCHEDULER_HEARTBEAT_INTERVAL``), stops handing out
requests, finishes what is in flight and keeps its leases alive by heartbeating; a paused crawl
is never considered finished. ``resume`` deletes the key and the workers carry on.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import time
from typing import Any

from crawlfleet.commands.opsargs import add_redis_arg, check_spider, connect, run_guarded
from crawlfleet.hub.keys import SpiderKeys
from crawlfleet.views.crawl import require_spider


def add_parser(subparsers: Any) -> None:
    for name, text in (
        ("pause", "workers stop taking requests of SPIDER (leases are kept alive)"),
        ("resume", "workers carry on with SPIDER"),
    ):
        p = subparsers.add_parser(name, help=text, description=text)
        p.add_argument("spider", help="spider name")
        add_redis_arg(p)
        p.set_defaults(run=run)


def _alive(client: Any, spider: str) -> int:
    now_s, now_us = client.time()
    return int(
        client.zcount(
            SpiderKeys.for_client(spider, client).workers, now_s * 1000 + now_us // 1000, "+inf"
        )
    )


def _run(args: argparse.Namespace) -> int:
    check_spider(args.spider)
    client = connect(args.redis_url)
    require_spider(client, args.spider, args.redis_url)
    key = SpiderKeys.for_client(args.spider, client).paused
    alive = _alive(client, args.spider)
    if args.command == "pause":
        who = {"by": f"{getpass.getuser()}@{socket.gethostname()}", "time": round(time.time(), 3)}
        if not client.set(key, json.dumps(who), nx=True):
            print(f"{args.spider} was already paused ({key} is set)")
            return 0
        print(
            f"paused {args.spider}: {alive} live worker(s) stop taking requests at their next "
            f"heartbeat and keep their leases; `crawlfleet resume {args.spider}` carries on"
        )
        return 0
    if not client.delete(key):
        print(f"{args.spider} was not paused")
        return 0
    print(f"resumed {args.spider}: {alive} live worker(s) carry on")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded(args.command, _run, args)
