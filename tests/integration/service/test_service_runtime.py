"""The shared runtime (``crawlfleet.service.runtime``) as an operator meets it, per service.

Every hub service, run as a subprocess on loopback: SIGTERM and SIGINT stop it gracefully with
exit status 0 (and a ``stopping`` log line naming the signal); a bad value from a flag or from
its environment variable is exit status 2 with exactly one line naming both; a port already
taken is exit status 1 (a runtime failure: systemd restarts it) with one line.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hubservice_procs import KINDS, service_argv
from support.net import free_port
from support.services import wait_healthy

from crawlfleet.accountpool.crypto import generate_key

# A value each service refuses, given as a variable its test argv sets no flag for:
# (variable, value, flag).
BAD_ENV = {
    "proxypool": ("PROXYPOOL_TEST_CONCURRENCY", "lots", "--test-concurrency"),
    "accountpool": ("ACCOUNTPOOL_TIMEOUT", "soon", "--timeout"),
    "dashboard": ("DASHBOARD_REFRESH", "nan", "--refresh"),
    "demosite": ("DEMOSITE_RATE_WINDOW", "soon", "--rate-window"),
}
PREFIXES = ("PROXYPOOL_", "ACCOUNTPOOL_", "DASHBOARD_", "DEMOSITE_", "REDIS_URL")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
    env.update(ACCOUNTPOOL_SECRET_KEY=generate_key(), PYTHONUNBUFFERED="1", **extra)
    return env


def start(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
    """``argv`` as a service process logging to a file, once its ``/health`` answers."""
    port = argv[argv.index("--port") + 1]
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(argv, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
    wait_healthy(process, f"http://127.0.0.1:{port}/health", log_path, timeout=30)
    return process, log_path


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=clean_env(**env), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_stop_signal_ends_with_status_0(
    kind: str, sig: signal.Signals, redis_url: str, tmp_path: Path
) -> None:
    port = free_port()
    process, log_path = start(
        tmp_path, [*service_argv(kind, port, redis_url), "--log-level", "info"]
    )
    process.send_signal(sig)
    assert process.wait(timeout=20) == 0, log_path.read_text()
    log = log_path.read_text()
    assert "Traceback" not in log, log
    assert sig.name in log and "stopping" in log, log


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_variable_is_status_2_with_one_line(kind: str, redis_url: str) -> None:
    variable, value, flag = BAD_ENV[kind]
    result = run(service_argv(kind, free_port(), redis_url), **{variable: value})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"crawlfleet {kind}"), lines[0]
    assert f"{flag}/{variable}" in lines[0] and repr(value) in lines[0], lines[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_taken_port_is_status_1_with_one_line(kind: str, redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run(service_argv(kind, port, redis_url))
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0], lines[0]


def test_the_demo_site_with_workers_stops_with_status_0(tmp_path: Path) -> None:
    # Two workers: uvicorn's supervisor owns the processes, the runtime the socket.
    argv = [sys.executable, "-m", "crawlfleet.cli", "demosite", "--port", str(free_port())]
    process, log_path = start(tmp_path, [*argv, "--workers", "2"])
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0, log_path.read_text()
