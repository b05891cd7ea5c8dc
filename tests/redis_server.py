"""A real redis-server on a free loopback port, owned by a test or a benchmark.

Imported under this unique name by tests and tests/bench; tests/conftest.py wraps it in fixtures
(several directories have a conftest.py, so ``from conftest import`` would be ambiguous).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import redis
from support.net import free_port
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
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def start(self) -> None:
        """(Re)start on the same port and directory, so AOF data survives a restart."""
        self.process = _spawn(self.port, self.password, self.workdir)


def _spawn(port: int, password: str | None, workdir: Path) -> subprocess.Popen[bytes]:
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    args = [
        server,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--daemonize",
        "no",
        "--logfile",
        str(workdir / "redis.log"),
    ]
    if password:
        args += ["--requirepass", password]
    proc = subprocess.Popen(args)

    def answers() -> bool:
        try:
            redis.Redis(port=port, password=password).ping()
        except redis.ConnectionError:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}") from None
            return False
        return True

    try:
        wait_until(answers, f"redis-server on port {port}", timeout=10)
    except AssertionError:
        proc.kill()
        raise
    return proc


def start_redis(tmp_path: Path, password: str | None = None) -> RedisServer:
    port = free_port()
    return RedisServer(port, password, _spawn(port, password, tmp_path), tmp_path)
