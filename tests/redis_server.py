"""A real redis-server (or valkey-server) on a free loopback port, owned by a test or a benchmark.

The binary is redis-server unless ``CRAWLFLEET_TEST_SERVER=valkey`` asks for valkey-server
(``server_binary``); a helper given ``server=`` runs that binary whatever the variable says.

Imported under this unique name by tests and tests/bench; tests/conftest.py wraps it in fixtures
(several directories have a conftest.py, so ``from conftest import`` would be ambiguous).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from support.net import free_port
from support.services import log_tail, stop_process
from support.waiting import wait_or_stop

SERVER_ENV = "CRAWLFLEET_TEST_SERVER"
SERVER_BINARIES = {"redis": "redis-server", "valkey": "valkey-server"}


def server_binary(flavor: str | None = None) -> str:
    """The path of the server binary for ``flavor``: redis or valkey; by default the one
    ``$CRAWLFLEET_TEST_SERVER`` names (redis when it is unset)."""
    name = flavor or os.environ.get(SERVER_ENV) or "redis"
    if name not in SERVER_BINARIES:
        raise ValueError(f"{SERVER_ENV}: {name!r} is not one of {', '.join(SERVER_BINARIES)}")
    binary = SERVER_BINARIES[name]
    return shutil.which(binary) or f"/usr/bin/{binary}"


@dataclass
class RedisServer:
    """A server process owned by a test; ``url`` carries the password when one is set."""

    port: int
    password: str | None
    process: subprocess.Popen[bytes]
    workdir: Path
    server: str

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
        self.process = _spawn(self.port, self.password, self.workdir, self.server)


def pings(port: int, **kwargs: Any) -> Callable[[], bool]:
    """A readiness probe: True once redis-server on ``port`` answers PING (``kwargs`` log in)."""

    def ping() -> bool:
        try:
            return bool(redis.Redis(port=port, socket_timeout=2, **kwargs).ping())
        except (redis.ConnectionError, OSError):
            return False

    return ping


def spawn_redis(
    workdir: Path,
    port: int,
    extra: list[str],
    ready: Callable[[], bool],
    server: str | None = None,
) -> subprocess.Popen[bytes]:
    """``server`` (``server_binary()``) in the foreground, logging to ``workdir``/redis.log, once
    ``ready()`` holds.

    ``extra`` carries the listening port(s), persistence and authentication options.
    """
    server = server or server_binary()
    log = workdir / "redis.log"
    args = [server, "--bind", "127.0.0.1", "--dir", str(workdir), "--save", ""]
    args += ["--daemonize", "no", "--logfile", str(log), *extra]
    proc = subprocess.Popen(args)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{server} exited with {proc.returncode}: {log_tail(log)}")
        return ready()

    wait_or_stop(up, f"{server} on port {port}", 10, proc.kill)
    return proc


def _spawn(port: int, password: str | None, workdir: Path, server: str) -> subprocess.Popen[bytes]:
    extra = ["--port", str(port), "--appendonly", "yes", "--appendfsync", "everysec"]
    if password:
        extra += ["--requirepass", password]
    return spawn_redis(workdir, port, extra, pings(port, password=password), server)


def start_redis(
    tmp_path: Path, password: str | None = None, server: str | None = None
) -> RedisServer:
    """A server (``server``, else ``server_binary()``) on a free port, AOF on, in ``tmp_path``."""
    port = free_port()
    binary = server or server_binary()
    return RedisServer(port, password, _spawn(port, password, tmp_path, binary), tmp_path, binary)
