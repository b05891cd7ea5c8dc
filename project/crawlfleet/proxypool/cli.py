"""``crawlfleet proxypool serve|fetch|test`` (also ``crawlfleet-proxypool``): run the proxy pool.

``serve`` runs the HTTP API with the fetch and test loops (``--no-fetch``/``--no-test`` to run
them elsewhere); ``fetch`` and ``test`` run one loop alone, or a single cycle with ``--once``.
Exit status: 0 after a clean stop, 2 on bad configuration, 1 when the service cannot run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from crawlfleet.proxypool.config import Settings, add_arguments, resolve
from crawlfleet.proxypool.service import Service
from crawlfleet.service import logs, runtime

PROG = "crawlfleet proxypool"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Scored HTTP proxies in Redis: sourced, tested and served."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    helps = {
        "serve": "HTTP API, with the fetch and test loops unless --no-fetch/--no-test",
        "fetch": "fetch the sources into the pool every PROXYPOOL_FETCH_INTERVAL",
        "test": "test every proxy in the pool every PROXYPOOL_TEST_INTERVAL",
    }
    for name, text in helps.items():
        command = sub.add_parser(name, help=text, description=text)
        add_arguments(command)
        if name != "serve":
            command.add_argument(
                "--once", action="store_true", help="run one cycle and exit (status 1 if it failed)"
            )
    return parser


async def _run(command: str, settings: Settings) -> int:
    service = Service(settings)
    if command == "serve":
        return await service.serve()
    return await service.run_alone(command)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def work() -> int:
        settings = resolve(args)
        logs.setup(settings.log_format, settings.log_level)
        return asyncio.run(_run(args.command, settings))

    return runtime.run(f"{PROG} {args.command}", work)


if __name__ == "__main__":
    sys.exit(main())
