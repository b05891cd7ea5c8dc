"""Service processes for tests: start a command with its output in a log file, wait (bounded)
until it answers over HTTP or listens on its port, stop it.

A failure names what was awaited and carries the tail of the process's log, so a service that
exits or never answers fails the test with its own last words, not only "timed out".
"""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.waiting import wait_until


def log_tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a log file ("" when it does not exist)."""
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def start_process(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Run ``argv`` with stdout and stderr appended to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)


def _wait_alive(
    process: subprocess.Popen[bytes],
    check: Callable[[], bool],
    what: str,
    log_path: Path | None,
    timeout: float,
) -> None:
    def ready() -> bool:
        if process.poll() is not None:
            tail = log_tail(log_path) if log_path else ""
            raise AssertionError(f"{what}: the process exited with {process.returncode}\n{tail}")
        return check()

    try:
        wait_until(ready, what, timeout=timeout)
    except AssertionError as error:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
            tail = log_tail(log_path) if log_path else ""
            raise AssertionError(f"{error}\n{tail}") from None
        raise


def wait_healthy(
    process: subprocess.Popen[bytes],
    url: str,
    log_path: Path | None = None,
    *,
    timeout: float = 30.0,
    headers: Mapping[str, str] | None = None,
    accept: Callable[[httpx.Response], bool] = lambda response: True,
) -> None:
    """Poll ``url`` (a ``/health`` URL) until it answers and ``accept`` likes the answer.

    The process is killed when the timeout passes; the error carries its log's tail.
    """

    def answers() -> bool:
        try:
            response = httpx.get(url, timeout=2.0, headers=headers, trust_env=False)
        except httpx.HTTPError:
            return False
        return accept(response)

    _wait_alive(process, answers, f"{url} to answer", log_path, timeout)


def listening(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_listening(
    process: subprocess.Popen[bytes],
    host: str,
    port: int,
    log_path: Path | None = None,
    *,
    timeout: float = 10.0,
) -> None:
    """Poll until ``process`` accepts connections on ``host:port`` (killed after ``timeout``)."""
    _wait_alive(
        process, lambda: listening(host, port), f"a listener on {host}:{port}", log_path, timeout
    )


def stop_process(
    process: subprocess.Popen[bytes], timeout: float = 10.0, *, sig: int = signal.SIGTERM
) -> int:
    """Send ``sig`` (SIGTERM) and wait; a process still running after ``timeout`` is killed."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    return process.returncode


@dataclass
class Service:
    """A process a test stops and starts again with the same command line (so the same port),
    ready once ``health`` answers below 500 or, for a server with no such URL (a forward proxy),
    once ``port`` on 127.0.0.1 accepts connections."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    health: str = ""
    proc: subprocess.Popen[bytes] | None = None
    port: int | None = None

    def start(self, timeout: float = 20.0) -> Service:
        self.proc = start_process(self.argv, self.log, env=self.env)
        if self.port is not None:
            wait_listening(self.proc, "127.0.0.1", self.port, self.log, timeout=timeout)
        else:
            wait_healthy(
                self.proc,
                self.health,
                self.log,
                timeout=timeout,
                accept=lambda r: r.status_code < 500,
            )
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
