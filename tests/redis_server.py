"""A real redis-server on a free loopback port, owned by a test or a benchmark.

Imported under this unique name by tests and tests/bench; tests/conftest.py wraps it in fixtures
(several directories have a conftest.py, so ``from conftest import`` would be ambiguous).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from support.net import free_port
from support.services import log_tail, stop_process
from support.waiting import wait_until


@dataclass
class RedisServer:
    """A redis-server process owned by a test; ``url`` carries the password when one is set."""

    port: int
    password: str | None
    process: subprocess.Popen[bytes]
    workdir: Path

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def stop(self) -> None:
        stop_process(self.process)

    def start(self) -> None:
        """(Re)start on the same port and directory, so AOF data survives a restart."""
        self.process = _spawn(self.port, self.password, self.workdir)


def pings(port: int, **kwargs: Any) -> Callable[[], bool]:
    """A readiness probe: True once redis-server on ``port`` answers PING (``kwargs`` log in)."""

    def ping() -> bool:
        try:
            return bool(redis.Redis(port=port, socket_timeout=2, **kwargs).ping())
        except (redis.ConnectionError, OSError):
            return False

    return ping


def spawn_redis(
    workdir: Path, port: int, extra: list[str], ready: Callable[[], bool]
) -> subprocess.Popen[bytes]:
    """redis-server in the foreground, logging to ``workdir``/redis.log, once ``ready()`` holds.

    ``extra`` carries the listening port(s), persistence and authentication options.
    """
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    log = workdir / "redis.log"
    args = [server, "--bind", "127.0.0.1", "--dir", str(workdir), "--save", ""]
    args += ["--daemonize", "no", "--logfile", str(log), *extra]
    proc = subprocess.Popen(args)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}: {log_tail(log)}")
        return ready()

    try:
        wait_until(up, f"redis-server on port {port}", timeout=10)
    except AssertionError:
        proc.kill()
        raise
    return proc


def _spawn(port: int, password: str | None, workdir: Path) -> subprocess.Popen[bytes]:
    extra = ["--port", str(port), "--appendonly", "yes", "--appendfsync", "everysec"]
    if password:
        extra += ["--requirepass", password]
    return spawn_redis(workdir, port, extra, pings(port, password=password))


def start_redis(tmp_path: Path, password: str | None = None) -> RedisServer:
    port = free_port()
    return RedisServer(port, password, _spawn(port, password, tmp_path), tmp_path)
