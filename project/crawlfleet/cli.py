"""`crawlfleet` — the operator command line and the entry point of every service.

``crawlfleet proxypool|accountpool|demosite|dashboard|agent …`` hands the rest of the command
line to that service's own CLI; the other sub-commands are operator commands that talk to the
hub's Redis.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from redis.exceptions import NoPermissionError

from crawlfleet.hub.connect import permission_problem

# sub-command -> module whose main(argv) runs it (services have their own flags).
SERVICES = {
    "proxypool": "crawlfleet.proxypool.cli",
    "accountpool": "crawlfleet.accountpool.cli",
    "demosite": "crawlfleet.demosite.cli",
    "dashboard": "crawlfleet.dashboard.cli",
    "agent": "crawlfleet.jobs.agent",
}

# Operator commands: modules in crawlfleet.commands exposing add_parser(subparsers) and run(args).
COMMANDS: list[str] = [
    "export",
    "requeue_failed",
    "bloom_info",
    "politeness",
    "status",
    "seed",
    "pause",
    "purge",
    "check",
    "acl",
    "ca",
    "job",
    "schedule",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crawlfleet", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SERVICES:
        sub.add_parser(
            name, help=f"run the {name} service (see: crawlfleet {name} --help)", add_help=False
        )
    for module_name in COMMANDS:
        importlib.import_module(f"crawlfleet.commands.{module_name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in SERVICES:
        service = importlib.import_module(SERVICES[args_list[0]])
        return int(service.main(args_list[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.run(args) or 0)
    except Exception as exc:
        if args.debug:
            raise
        said = str(exc)
        if isinstance(exc, NoPermissionError):  # an ACL user without the rights for this command
            said = permission_problem(exc, getattr(args, "redis_url", ""))
        print(f"crawlfleet {args.command}: error: {said}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
