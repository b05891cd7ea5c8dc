"""`crawlfleet acl render`: the hub's Redis ACL file, one user per role (crawlfleet.hub.acl).

The passwords are read as one JSON object from standard input (``{"crawler": "…", …}``: a role
without a password gets no user), never from the command line. ``--sentinel`` renders the
Sentinels' file instead (``crawlfleet.hub.acl.render_sentinel``), ``--cluster`` the file of a Redis
Cluster's nodes. Prints the ``aclfile`` text, or
with ``-o FILE`` writes it (mode 0600, only when it changed) and prints
``{"changed": bool, "users": […]}`` for Ansible's ``changed_when``. Exit status 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crawlfleet.commands.opsargs import UsageError, check_spider, run_guarded
from crawlfleet.hub import acl
from crawlfleet.service.tlsca import write_private


def add_parser(subparsers: Any) -> None:
    text = "render the Redis ACL users of every role (passwords as JSON on stdin)"
    p = subparsers.add_parser("acl", help=text, description=text)
    sub = p.add_subparsers(dest="acl_command", metavar="STEP", required=True)
    render = sub.add_parser("render", help=text)
    render.add_argument(
        "--spider",
        dest="spiders",
        action="append",
        default=[],
        help="a spider whose keys the crawler and dashboard users may use (repeat)",
    )
    render.add_argument(
        "--user",
        dest="users",
        action="append",
        default=[],
        metavar="ROLE=NAME",
        help="name ROLE's Redis user NAME (default: the role's name)",
    )
    render.add_argument(
        "--sentinel",
        action="store_true",
        help="the Sentinels' file instead: default is their administrator with the sentinel "
        "role's password, every service role's user may only find the primary",
    )
    render.add_argument(
        "--cluster",
        action="store_true",
        help="the file of a Redis Cluster's nodes: the crawler's keys tagged {<spider>}, its "
        "cluster discovery commands, the cluster role's user",
    )
    render.add_argument("-o", "--output", type=Path, help="write the file here (mode 0600)")
    p.set_defaults(run=run)


def _passwords(text: str) -> dict[str, str]:
    try:
        data = json.loads(text)
    except ValueError:
        raise UsageError("stdin must be a JSON object of role: password") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise UsageError("stdin must be a JSON object of role: password (strings)")
    return data


def _run(args: argparse.Namespace) -> int:
    spiders = [check_spider(s) for s in args.spiders]
    users: dict[str, str] = {}
    for item in args.users:
        role, eq, name = item.partition("=")
        if not eq:
            raise UsageError(f"--user {item[:40]!r} must look like ROLE=NAME")
        users[role] = name
    passwords = _passwords(sys.stdin.read())
    try:
        if args.sentinel:
            if "sentinel" not in passwords:
                raise UsageError("--sentinel needs the sentinel role's password on stdin")
            text = acl.render_sentinel(passwords["sentinel"], passwords, users)
        else:
            text = acl.render(passwords, spiders, users, cluster=args.cluster)
    except acl.AclError as exc:
        raise UsageError(str(exc)) from None
    if args.output is None:
        sys.stdout.write(text)
        return 0
    changed = write_private(args.output, text.encode())
    names = [line.split()[1] for line in text.splitlines() if line.split()[1] != "default"]
    print(json.dumps({"changed": changed, "users": names}))
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("acl", _run, args)
