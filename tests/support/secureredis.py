"""A redis-server with ACL users (an ``aclfile``) or TLS, on free loopback ports, for a test.

``start_acl_redis`` renders the users with :func:`crawlfleet.acl.render` (the file the redis role
deploys) and hands out per-role URLs; ``start_tls_redis`` makes a CA and a server certificate
with :mod:`crawlfleet.tlsca` and listens with TLS only (``--port 0``), ``tls_url`` naming the
CA bundle a client verifies with.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from crawlfleet import acl, tlsca
from support.net import free_port
from support.services import log_tail
from support.waiting import wait_until

PASSWORDS = {role: f"{role}-password-0123456789" for role in acl.ROLES}


@dataclass
class SecureRedis:
    """One redis-server owned by a test; ``url(role)`` logs in as that role's user."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    scheme: str = "redis"
    query: str = ""
    passwords: dict[str, str] = field(default_factory=dict)

    def url(self, role: str | None = None, host: str = "127.0.0.1") -> str:
        auth = f"{role}:{self.passwords[role]}@" if role else ""
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{auth}{host}:{self.port}/0{query}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def _spawn(
    workdir: Path, port: int, extra: list[str], ready: Callable[[], bool]
) -> subprocess.Popen[bytes]:
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    log = workdir / "redis.log"
    args = [
        server,
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "no",
    ]
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


def _answers(port: int, **kwargs: Any) -> Callable[[], bool]:
    def ping() -> bool:
        try:
            return bool(redis.Redis(port=port, socket_timeout=2, **kwargs).ping())
        except (redis.ConnectionError, OSError):
            return False

    return ping


def start_acl_redis(workdir: Path, spiders: list[str]) -> SecureRedis:
    """redis-server with the rendered ACL users of every role (``default`` off)."""
    workdir.mkdir(parents=True, exist_ok=True)
    aclfile = workdir / "users.acl"
    aclfile.write_text(acl.render(PASSWORDS, spiders))
    port = free_port()
    ready = _answers(port, username="operator", password=PASSWORDS["operator"])
    proc = _spawn(workdir, port, ["--port", str(port), "--aclfile", str(aclfile)], ready)
    return SecureRedis(port, proc, workdir, passwords=dict(PASSWORDS))


@dataclass
class TlsFiles:
    """The CA directory and the server's files made by crawlfleet.tlsca."""

    ca_dir: Path
    ca_cert: Path
    cert: Path
    key: Path


def make_tls_files(
    directory: Path,
    host: str = "localhost",
    names: tuple[str, ...] = ("localhost", "127.0.0.1"),
    now: tlsca.Clock = tlsca.utcnow,
    days: int = tlsca.HOST_DAYS,
) -> TlsFiles:
    tlsca.ensure_ca(directory, now=now)
    tlsca.ensure_host(directory, host, names, now=now, days=days, renew_days=min(30, days - 1))
    return TlsFiles(
        directory, directory / "ca.crt", directory / f"{host}.crt", directory / f"{host}.key"
    )


def start_tls_redis(
    workdir: Path, files: TlsFiles, password: str = "tls-password-0123456789"
) -> SecureRedis:
    """redis-server listening with TLS only, certificate ``files``; clients need no certificate."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    extra = [
        "--port",
        "0",
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(files.cert),
        "--tls-key-file",
        str(files.key),
        "--tls-ca-cert-file",
        str(files.ca_cert),
        "--tls-auth-clients",
        "no",
        "--requirepass",
        password,
    ]
    # up is all this asks: the tests' certificates may be made not to verify
    ready = _answers(
        port, password=password, ssl=True, ssl_cert_reqs="none", ssl_check_hostname=False
    )
    proc = _spawn(workdir, port, extra, ready)
    return SecureRedis(
        port,
        proc,
        workdir,
        scheme="rediss",
        query=f"ssl_ca_certs={files.ca_cert}",
        passwords={"default": password},
    )
