"""`crawlfleet schedule add|list|remove|pause|resume`: recurring jobs (docs/jobs.md).

The schedules live in the hub's Redis; the scheduler of the hub's agent (``crawlfleet agent
--schedules``) fires them. ``--cron`` is five fields in UTC, ``--every`` a duration (``6h``,
``1h30m``). A recurring job starts with a fresh duplicate filter (``--fresh-dupefilter``, the
default: a recrawl) or keeps it (``--keep-dupefilter``: only new URLs are fetched).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from crawlfleet.commands import opsargs
from crawlfleet.commands.job import add_job_args, job_spec
from crawlfleet.jobs import schedules, store
from crawlfleet.jobs.timespec import TimeSpecError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("schedule", help="recurring crawl jobs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = opsargs.intermixed(actions.add_parser("add", help="a new recurring job"))
    add_job_args(add)
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="five fields, UTC: '0 3 * * *' is 03:00 every day")
    when.add_argument("--every", help="a duration: 6h, 30m, 1h30m, 2d")
    add.add_argument(
        "--overlap",
        action="store_true",
        help="start even while a job of the same spider still runs (default: skip that time)",
    )
    dupe = add.add_mutually_exclusive_group()
    dupe.add_argument(
        "--fresh-dupefilter",
        dest="dupefilter",
        action="store_const",
        const="fresh",
        help="each job forgets the fingerprints first: a full recrawl (the default)",
    )
    dupe.add_argument(
        "--keep-dupefilter",
        dest="dupefilter",
        action="store_const",
        const="keep",
        help="each job keeps the fingerprints: only URLs never seen are fetched",
    )
    add.set_defaults(dupefilter="fresh")
    actions.add_parser("list", help="the schedules").add_argument(
        "--json", action="store_true", help="JSON records"
    )
    for name, text in (
        ("remove", "delete a schedule (a running job of it goes on)"),
        ("pause", "stop firing a schedule"),
        ("resume", "fire a paused schedule again, from its next occurrence"),
    ):
        actions.add_parser(name, help=text).add_argument("id", help="schedule id")
    for p in actions.choices.values():
        opsargs.add_redis_arg(p)
    parser.set_defaults(run=run)


def _time(seconds: Any) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(seconds)))


def _run(args: argparse.Namespace) -> int:
    when: dict[str, Any] = {}
    if args.action == "add":
        opsargs.check_spider(args.spider)
        try:
            when = schedules.when_fields(args.cron, args.every)
        except TimeSpecError as exc:
            raise opsargs.UsageError(str(exc)) from None
    client = opsargs.connect(args.redis_url)
    if args.action == "add":
        spec = job_spec(args, overlap=args.overlap)
        record = schedules.create_schedule(client, when, spec, args.dupefilter, store.who())
        print(
            f"schedule {record['id']}: {args.project}/{args.spider} "
            f"{schedules.describe_when(record)}, {args.dupefilter} duplicate filter, next at "
            f"{_time(record['next'])}"
        )
        return 0
    if args.action == "list":
        found = schedules.list_schedules(client)
        if args.json:
            print(json.dumps(found, indent=2))
            return 0
        for r in found:
            state = "paused" if r.get("paused") else f"next {_time(r['next'])}"
            last = f"; last {_time(r['last'])}: {r['last_result']}" if r.get("last") else ""
            fires = schedules.describe_when(r)
            print(f"{r['id']:>4} {r['project']}/{r['spider']} {fires} {state}{last}")
        return 0
    if not args.id.strip():
        raise opsargs.UsageError("a schedule id must not be empty")
    if args.action == "remove":
        print(schedules.remove(client, args.id))
    else:
        print(schedules.pause_or_resume(client, args.id, args.action == "pause", store.who()))
    return 0


def run(args: argparse.Namespace) -> int:
    return opsargs.run_guarded("schedule", _run, args)
