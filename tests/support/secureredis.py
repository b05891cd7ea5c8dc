"""A redis-server with ACL users (an ``aclfile``) or TLS, on free loopback ports, for a test.

``start_acl_redis`` renders the users with :func:`crawlfleet.hub.acl.render` (the file the redis
role deploys) and hands out per-role URLs; ``start_tls_redis`` makes a CA and a server
certificate with :mod:`crawlfleet.service.tlsca` and listens with TLS only (``--port 0``),
``tls_url`` naming the CA bundle a client verifies with.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from crawlfleet.hub import acl
from crawlfleet.service import tlsca
from support.net import free_port
from support.services import stop_process

from redis_server import pings, spawn_redis

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
        stop_process(self.process)


def start_acl_redis(workdir: Path, spiders: list[str], extra_acl: str = "") -> SecureRedis:
    """redis-server with the rendered ACL users of every role (``default`` off), and the
    ``aclfile`` lines ``extra_acl`` after them (a test's own admin user)."""
    workdir.mkdir(parents=True, exist_ok=True)
    aclfile = workdir / "users.acl"
    aclfile.write_text(acl.render(PASSWORDS, spiders) + extra_acl)
    port = free_port()
    ready = pings(port, username="operator", password=PASSWORDS["operator"])
    extra = ["--port", str(port), "--appendonly", "no", "--aclfile", str(aclfile)]
    proc = spawn_redis(workdir, port, extra, ready)
    return SecureRedis(port, proc, workdir, passwords=dict(PASSWORDS))


@dataclass
class TlsFiles:
    """The CA directory and the server's files made by crawlfleet.service.tlsca."""

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
        "--appendonly",
        "no",
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
    ready = pings(port, password=password, ssl=True, ssl_cert_reqs="none", ssl_check_hostname=False)
    proc = spawn_redis(workdir, port, extra, ready)
    return SecureRedis(
        port,
        proc,
        workdir,
        scheme="rediss",
        query=f"ssl_ca_certs={files.ca_cert}",
        passwords={"default": password},
    )
