"""`crawlfleet job start|list|show|stop|pause|resume`: crawl jobs on the fleet (docs/jobs.md).

``start`` asks the agents (``crawlfleet agent``) on the chosen workers to start the spider's
crawler units and waits for every answer: all started, or none is left running. ``stop`` drains
(pause, SIGTERM, leases go back), ``pause``/``resume`` hold the crawl with ``<spider>:paused``.
Every finished job keeps its record (``show``) after the crawl's keys are purged.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from crawlfleet.commands import opsargs
from crawlfleet.jobs import control, store

ACTIONS = ("start", "list", "show", "stop", "pause", "resume", "logs")


def pair(flag: str) -> Any:
    """argparse ``type=`` of ``-a k=v`` / ``-s K=V`` (the rule: ``control.name_value``)."""

    def parse(text: str) -> tuple[str, str]:
        try:
            return control.name_value(flag, text)
        except store.JobError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def workers_count(text: str) -> int | None:
    """argparse ``type=`` of ``--workers`` (the rule: ``control.workers_count``)."""
    try:
        return control.workers_count(text)
    except store.JobError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def job_spec(
    args: argparse.Namespace, *, overlap: bool = False, fresh_dupefilter: bool = False
) -> control.JobSpec:
    """The job the arguments of :func:`add_job_args` describe (shared with ``schedule add``)."""
    return control.JobSpec(
        project=args.project,
        spider=args.spider,
        args=args.args,
        settings=args.settings,
        workers=args.workers,
        overlap=overlap,
        fresh_dupefilter=fresh_dupefilter,
    )


def add_job_args(p: argparse.ArgumentParser) -> None:
    """PROJECT SPIDER and what a job runs with (shared with ``schedule add``)."""
    p.add_argument("project", help="the project (as the agents registered it)")
    p.add_argument("spider", help="one of its spiders")
    p.add_argument(
        "-a",
        dest="args",
        action="append",
        type=pair("-a"),
        default=[],
        metavar="NAME=VALUE",
        help="spider argument (repeatable), as scrapy crawl -a",
    )
    p.add_argument(
        "-s",
        dest="settings",
        action="append",
        type=pair("-s"),
        default=[],
        metavar="NAME=VALUE",
        help="Scrapy setting override (repeatable), as scrapy crawl -s",
    )
    p.add_argument(
        "--workers",
        type=workers_count,
        default=None,
        metavar="N|all",
        help="how many live workers run it (default all that have the spider)",
    )


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "job", help="start, list, show, stop, pause and resume crawl jobs"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = opsargs.intermixed(
        actions.add_parser("start", help="start a spider's crawl on the workers")
    )
    add_job_args(start)
    start.add_argument(
        "--fresh-dupefilter",
        action="store_true",
        help="forget the crawl's fingerprints first (a full recrawl)",
    )
    list_ = actions.add_parser("list", help="the newest jobs")
    list_.add_argument("--limit", type=int, default=20, help="how many (default %(default)s)")
    list_.add_argument("--json", action="store_true", help="JSON records")
    show = actions.add_parser("show", help="one job's record and numbers")
    show.add_argument("id", help="job id")
    show.add_argument("--json", action="store_true", help="the JSON record")
    logs = actions.add_parser("logs", help="the last log lines of each of a job's crawler units")
    logs.add_argument("id", help="job id")
    logs.add_argument(
        "-n",
        "--lines",
        type=int,
        default=control.LOG_LINES,
        help=f"lines per unit, 1 to {control.MAX_LOG_LINES} (default %(default)s)",
    )
    logs.add_argument(
        "--timeout",
        type=float,
        default=control.LOG_TIMEOUT,
        help="seconds the agents have to answer (default %(default)s)",
    )
    for name, text in (
        ("stop", "drain and stop a job (leases go back to the queue)"),
        ("pause", "its workers stop taking requests (leases kept alive)"),
        ("resume", "a paused job carries on"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("id", help="job id")
    for p in (start, *[actions.choices[a] for a in ("stop",)]):
        p.add_argument(
            "--timeout",
            type=float,
            default=control.DEFAULT_TIMEOUT,
            help="seconds the agents have to answer (default %(default)s)",
        )
    for p in actions.choices.values():
        opsargs.add_redis_arg(p)
    parser.set_defaults(run=run)


def _time(ms: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(ms) / 1000))
    except (TypeError, ValueError):
        return "-"


def _print_list(jobs: list[dict[str, Any]]) -> None:
    print(
        f"{'id':>5} {'state':9} {'project/spider':28} {'workers':16} {'created (UTC)':19} "
        f"{'pages':>7} {'items':>7}  by"
    )
    for job in jobs:
        stats: dict[str, Any] = job["stats"] if isinstance(job.get("stats"), dict) else {}
        print(
            f"{job.get('id', ''):>5} {job.get('state', ''):9} "
            f"{(job.get('project', '') + '/' + job.get('spider', ''))[:28]:28} "
            f"{','.join(job.get('workers') or [])[:16]:16} {_time(job.get('created')):19} "
            f"{stats.get('pages', '-'):>7} {stats.get('items', '-'):>7}  {job.get('by', '')}"
        )


def _print_show(job: dict[str, Any]) -> None:
    for name in (
        "id",
        "state",
        "project",
        "spider",
        "by",
        "schedule",
        "dupefilter",
        "error",
        "stopped_by",
    ):
        if job.get(name):
            print(f"{name}: {job[name]}")
    for name in ("args", "settings"):
        if job.get(name):
            print(f"{name}: " + " ".join(f"{k}={v}" for k, v in job[name]))
    print(f"workers: {', '.join(job.get('workers') or [])}")
    for name in ("created", "started", "ended"):
        if job.get(name):
            print(f"{name}: {_time(job[name])}")
    stats = job.get("stats") if isinstance(job.get("stats"), dict) else None
    if stats:
        print(
            f"pages: {stats['pages']}  items: {stats['items']}  errors: {stats['errors']}  "
            f"bans: {stats['bans']}  failed: {stats['failed']}  dead letters: "
            f"{stats['deadletter']}  duration: {stats['duration']}s"
        )
    for host, state in sorted(job.get("hosts", {}).items()):
        share = (stats or {}).get("per_worker", {}).get(host, {})
        extra = f"  pages {share['pages']} ({share['share']:.0%})" if share else ""
        error = f"  {state['error']}" if state.get("error") else ""
        print(f"  {host}: {state.get('state')} {','.join(state.get('units', []))}{extra}{error}")
    for entry in job.get("history", []):
        print(
            f"{_time(entry.get('time'))}  {entry.get('by')}  {entry.get('action')}: "
            f"{entry.get('detail', '')}"
        )


def _print_logs(found: dict[str, dict[str, Any]]) -> None:
    for worker, reply in found.items():
        if not reply.get("ok"):
            print(f"== {worker}: {reply.get('error')}")
            continue
        for unit, lines in reply.get("units", {}).items():
            print(f"== {worker} {unit}")
            for line in lines:
                print(line)


def _run(args: argparse.Namespace) -> int:
    if args.action == "start":
        opsargs.check_spider(args.spider)
    if getattr(args, "id", None) is not None and not args.id.strip():
        raise opsargs.UsageError("a job id must not be empty")
    if args.action == "logs" and not 1 <= args.lines <= control.MAX_LOG_LINES:
        raise opsargs.UsageError(f"--lines must be from 1 to {control.MAX_LOG_LINES}")
    client = opsargs.connect(args.redis_url)
    by = store.who()
    if args.action == "list":
        jobs = store.list_jobs(client, max(1, args.limit))
        if args.json:
            print(json.dumps(jobs, indent=2))
        else:
            _print_list(jobs)
        return 0
    if args.action == "logs":
        _print_logs(control.unit_logs(client, args.id, args.lines, args.timeout))
        return 0
    if args.action == "show":
        job = {**store.get_job(client, args.id), "history": store.job_history(client, args.id)}
        if args.json:
            print(json.dumps(job, indent=2))
        else:
            _print_show(job)
        return 0
    if args.action == "start":
        spec = job_spec(args, fresh_dupefilter=args.fresh_dupefilter)
        outcome = control.start_job(client, spec, by, args.timeout)
    elif args.action == "stop":
        outcome = control.stop_job(client, args.id, by, args.timeout)
    elif args.action == "pause":
        outcome = control.pause_job(client, args.id, by)
    else:
        outcome = control.resume_job(client, args.id, by)
    print(outcome.message)
    return 1 if outcome.failed else 0


def run(args: argparse.Namespace) -> int:
    return opsargs.run_guarded("job", _run, args)
