"""`crawlfleet ca init|issue`: the hub's small certificate authority (crawlfleet.service.tlsca).

``init --dir D`` creates or renews the CA in D; ``issue --dir D --host H --name N…`` creates or
renews H's key and certificate (subject alternative names N: DNS names and IP addresses). Each
prints one JSON object ``{"changed": bool, "reason": …, "files": […]}`` for Ansible's
``changed_when``; nothing is written when nothing has to change. Exit status 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from crawlfleet.commands.opsargs import UsageError, run_guarded
from crawlfleet.service import tlsca


def add_parser(subparsers: Any) -> None:
    text = "create or renew the hub's CA and per-host TLS certificates (JSON: changed or not)"
    p = subparsers.add_parser("ca", help=text, description=text)
    sub = p.add_subparsers(dest="ca_command", metavar="STEP", required=True)
    init = sub.add_parser("init", help="create the CA (ca.key 0600, ca.crt) or renew it")
    issue = sub.add_parser("issue", help="create or renew one host's key and certificate")
    for step, days in ((init, tlsca.CA_DAYS), (issue, tlsca.HOST_DAYS)):
        step.add_argument("--dir", required=True, type=Path, help="the CA's directory")
        step.add_argument(
            "--days", type=int, default=days, help="validity of a new certificate (%(default)s)"
        )
        step.add_argument(
            "--renew-days",
            type=int,
            default=tlsca.RENEW_DAYS,
            help="renew when it expires within this many days (default %(default)s)",
        )
    init.add_argument("--name", default=tlsca.CA_NAME, help="the CA's common name")
    issue.add_argument("--host", required=True, help="host name: names <host>.key/.crt")
    issue.add_argument(
        "--name",
        dest="names",
        action="append",
        default=[],
        help="a DNS name or IP address the certificate is valid for (repeat)",
    )
    issue.add_argument("--out", type=Path, help="where the host's files go (default: --dir)")
    p.set_defaults(run=run)


def _run(args: argparse.Namespace) -> int:
    try:
        if args.ca_command == "init":
            outcome = tlsca.ensure_ca(
                args.dir, name=args.name, days=args.days, renew_days=args.renew_days
            )
        else:
            outcome = tlsca.ensure_host(
                args.dir,
                args.host,
                args.names,
                out=args.out,
                days=args.days,
                renew_days=args.renew_days,
            )
    except tlsca.CaError as exc:
        raise UsageError(str(exc)) from None
    print(
        json.dumps({"changed": outcome.changed, "reason": outcome.reason, "files": outcome.files})
    )
    return 0


def run(args: argparse.Namespace) -> int:
    return run_guarded("ca", _run, args)
