"""The operator CLI for tests: ``crawlfleet ARGS…`` in this process (``cli``) or in a subprocess
exactly as an operator runs it (``cli_process``), and the check of a one-line error."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from crawlfleet.cli import main
from support.crawl import ROOT


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> Result:
    """``crawlfleet ARGS…`` through its entry point, in this process (fast; same code path)."""
    saved_env = dict(os.environ)
    os.environ.pop("REDIS_URL", None)
    os.environ.update(env or {})
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse usage errors
                code = int(exc.code or 0)
    finally:
        sys.stdin = saved_stdin
        os.environ.clear()
        os.environ.update(saved_env)
    return Result(code, out.getvalue(), err.getvalue())


def cli_process(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Result:
    """``crawlfleet ARGS…`` in a subprocess, exactly as an operator runs it."""
    # An inherited REDIS_URL must not stand in for a missing --redis-url.
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    full_env = {**base, "PYTHONPATH": str(ROOT / "project"), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "crawlfleet.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line_error(result: Result, code: int, *needles: str) -> None:
    assert result.code == code, (result.code, result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for needle in needles:
        assert needle in lines[0], lines[0]
