"""A Redis Sentinel group on loopback for failover tests and benchmarks: one primary, two replicas
(``replicaof``) and three ``redis-server --sentinel`` processes with quorum 2, a short
``down-after-milliseconds`` and ``failover-timeout``, every config file in a temporary directory.

``SentinelGroup.url`` is the ``redis+sentinel://`` URL clients use; ``kill_primary`` sends SIGKILL
to the primary and ``wait_failover`` waits (bounded) until every Sentinel names a new primary that
answers as one. Nothing here sleeps to wait: every wait polls a condition with a deadline.
With ``tls`` (certificates from :func:`support.secureredis.make_tls_files`) every process listens
with TLS only (``port 0``, ``tls-replication yes``) and ``url`` is a ``rediss+sentinel://`` URL.
With ``acl`` the servers and the Sentinels run the ACL files the redis role writes
(``crawlfleet.hub.acl.render`` and ``render_sentinel``): the replicas log in as ``replica``, the
Sentinels as ``sentinel``, and ``url(user=...)`` is a role's URL, its own user on both.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from crawlfleet.hub import acl
from support.net import free_port
from support.secureredis import TlsFiles
from support.services import start_process, stop_process, wait_listening
from support.waiting import wait_until

from redis_server import server_binary

SERVICE = "crawl"
PASSWORD = "sentinel-test-pw-0123"
SENTINEL_PASSWORD = "sentinel-own-pw-4567"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000
# With acl: every service role's password (the servers' and the Sentinels' users alike).
ACL_PASSWORDS = {role: f"{role}-acl-test-pw-0123" for role in acl.ROLES}
ACL_SPIDERS = ("site",)


@dataclass
class Node:
    """One redis-server (data node or Sentinel) this group started."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class SentinelGroup:
    """Three data nodes and three Sentinels watching them as ``service``."""

    workdir: Path
    service: str = SERVICE
    password: str = PASSWORD
    sentinel_password: str = SENTINEL_PASSWORD
    tls: TlsFiles | None = None
    acl: bool = False
    down_after_ms: int = DOWN_AFTER_MS
    failover_timeout_ms: int = FAILOVER_TIMEOUT_MS
    nodes: list[Node] = field(default_factory=list)
    sentinels: list[Node] = field(default_factory=list)

    def url(
        self, db: int = 0, service: str | None = None, ca: Path | None = None, user: str = ""
    ) -> str:
        """The clients' URL; with TLS, verified against ``ca`` (the group's CA by default).
        With ``acl``, ``user``'s (a role of ``ACL_PASSWORDS``) on the servers and Sentinels."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        path = f"{hosts}/{service or self.service}/{db}"
        if self.acl:
            secret = ACL_PASSWORDS[user or "operator"]
            login = f"sentinel_username={user or 'operator'}&sentinel_password={secret}"
            url = f"{scheme}://{user or 'operator'}:{secret}@{path}?{login}"
        else:
            url = f"{scheme}://:{self.password}@{path}?sentinel_password={self.sentinel_password}"
        if self.tls:
            url += f"&ssl_ca_certs={ca or self.tls.ca_cert}"
        return url

    def _tls_options(self) -> dict[str, Any]:
        # the group's own probes check the chain only: a test may issue another name's certificates
        if self.tls is None:
            return {}
        return {"ssl": True, "ssl_ca_certs": str(self.tls.ca_cert), "ssl_check_hostname": False}

    def node_client(self, port: int, socket_timeout: float = 2) -> redis.Redis:
        """A client of one server: the operator user with ``acl``."""
        login: dict[str, Any] = {"password": self.password}
        if self.acl:
            login = {"username": "operator", "password": ACL_PASSWORDS["operator"]}
        return redis.Redis(port=port, socket_timeout=socket_timeout, **login, **self._tls_options())

    def sentinel_client(self, node: Node) -> redis.Redis:
        return redis.Redis(
            port=node.port, password=self.sentinel_password, socket_timeout=2, **self._tls_options()
        )

    def named_primaries(self) -> set[int | None]:
        """The primary port each live Sentinel names now (None: it cannot answer)."""
        named: set[int | None] = set()
        for sentinel in self.sentinels:
            if not sentinel.alive():
                continue
            try:
                addr = self.sentinel_client(sentinel).sentinel_get_master_addr_by_name(self.service)
            except redis.RedisError:
                named.add(None)
                continue
            named.add(int(addr[1]) if addr else None)
        return named

    def primary_port(self) -> int:
        ports = self.named_primaries()
        assert len(ports) == 1 and None not in ports, f"Sentinels disagree: {ports}"
        return int(next(iter(ports)))  # type: ignore[arg-type]

    def _role(self, port: int) -> str:
        try:
            return str(self.node_client(port).info("replication")["role"])
        except redis.RedisError:
            return "down"

    def wait_ready(self, timeout: float = 30) -> None:
        """Replicas in sync and every Sentinel knowing both replicas and the other Sentinels."""
        primary = self.nodes[0].port

        def ready() -> bool:
            info = self.node_client(primary).info("replication")
            online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            if len(online) != 2 or any(s.get("state") != "online" for s in online):
                return False
            for sentinel in self.sentinels:
                master = self.sentinel_client(sentinel).sentinel_master(self.service)
                if int(master["num-slaves"]) != 2 or int(master["num-other-sentinels"]) != 2:
                    return False
            return True

        wait_until(ready, "the Sentinel group to see its primary, 2 replicas, 3 Sentinels", timeout)

    def kill_primary(self) -> int:
        """SIGKILL the current primary; its port."""
        port = self.primary_port()
        node = next(n for n in self.nodes if n.port == port)
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(timeout=10)
        return port

    def wait_failover(self, old_port: int, timeout: float = 30) -> int:
        """Until every live Sentinel names one new primary and it answers as a primary."""

        def switched() -> bool:
            ports = self.named_primaries()
            if len(ports) != 1 or None in ports or old_port in ports:
                return False
            return self._role(int(next(iter(ports)))) == "master"  # type: ignore[arg-type]

        wait_until(switched, f"the Sentinels to promote a replica of :{old_port}", timeout, 0.02)
        return self.primary_port()

    def restart(self, node: Node, replica_of: int | None = None) -> None:
        """Stop a data node (SIGTERM: it writes its AOF) if it runs, and start it again on its
        port and directory, from its AOF; with ``replica_of``, as that primary's replica (the
        Sentinels would make it one anyway; this way it never answers as a second primary)."""
        if node.alive():
            stop_process(node.process, timeout=30)
        argv = list(node.argv)
        if "--replicaof" in argv:
            at = argv.index("--replicaof")
            del argv[at : at + 3]
        if replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(replica_of)]
        # the log is appended to: what the node said before the restart stays
        node.process = start_process(argv, node.log, cwd=node.log.parent)
        wait_listening(node.process, "127.0.0.1", node.port, node.log, timeout=60)

    def stop(self) -> None:
        for node in [*self.sentinels, *self.nodes]:
            stop_process(node.process, timeout=5)


def _start(argv: list[str], workdir: Path, port: int, name: str) -> Node:
    log = workdir / f"{name}.log"
    process = start_process(argv, log, cwd=workdir)
    wait_listening(process, "127.0.0.1", port, log, timeout=10)
    return Node(port, process, log, argv)


def _tls_config(tls: TlsFiles | None, port: int) -> list[tuple[str, str]]:
    """The listening directives: plain ``port``, or TLS only on it (replication over TLS too)."""
    if tls is None:
        return [("port", str(port))]
    return [
        ("port", "0"),
        ("tls-port", str(port)),
        ("tls-cert-file", str(tls.cert)),
        ("tls-key-file", str(tls.key)),
        ("tls-ca-cert-file", str(tls.ca_cert)),
        ("tls-auth-clients", "no"),
        ("tls-replication", "yes"),
    ]


def _data_node(group: SentinelGroup, index: int, primary: int | None) -> Node:
    port = free_port()
    workdir = group.workdir / f"redis{index}"
    workdir.mkdir(parents=True)
    listen = [arg for name, value in _tls_config(group.tls, port) for arg in (f"--{name}", value)]
    argv = [
        server_binary(),
        *listen,
        "--bind", "127.0.0.1",
        "--dir", str(workdir),
        "--save", "",
        "--appendonly", "yes",
        "--masterauth", group.password,
        "--daemonize", "no",
    ]  # fmt: skip
    if group.acl:
        users = workdir / "users.acl"
        hub = dict.fromkeys(acl.HUB_ROLES, group.password)
        users.write_text(acl.render({**ACL_PASSWORDS, **hub}, ACL_SPIDERS))
        argv += ["--aclfile", str(users), "--masteruser", "replica"]
    else:
        argv += ["--requirepass", group.password]
    if primary is not None:
        argv += ["--replicaof", "127.0.0.1", str(primary)]
    return _start(argv, workdir, port, "redis")


def _sentinel(group: SentinelGroup, index: int, primary: int) -> Node:
    port = free_port()
    workdir = group.workdir / f"sentinel{index}"
    workdir.mkdir(parents=True)
    config = workdir / "sentinel.conf"
    name = group.service
    listen = "".join(f"{name} {value}\n" for name, value in _tls_config(group.tls, port))
    if group.acl:
        users = workdir / "users.acl"
        users.write_text(acl.render_sentinel(group.sentinel_password, ACL_PASSWORDS))
        login = f'aclfile "{users}"\n'
    else:
        login = f"requirepass {group.sentinel_password}\n"
    config.write_text(
        listen + "bind 127.0.0.1\n"
        "daemonize no\n"
        f'dir "{workdir}"\n'
        f"{login}"
        f"sentinel sentinel-pass {group.sentinel_password}\n"
        f"sentinel monitor {name} 127.0.0.1 {primary} 2\n"
        f"sentinel auth-pass {name} {group.password}\n"
        + (f"sentinel auth-user {name} sentinel\n" if group.acl else "")
        + f"sentinel down-after-milliseconds {name} {group.down_after_ms}\n"
        f"sentinel failover-timeout {name} {group.failover_timeout_ms}\n"
        f"sentinel parallel-syncs {name} 1\n"
    )
    return _start([server_binary(), str(config), "--sentinel"], workdir, port, "sentinel")


def start_sentinel_group(
    workdir: Path,
    tls: TlsFiles | None = None,
    acl: bool = False,
    down_after_ms: int = DOWN_AFTER_MS,
    failover_timeout_ms: int = FAILOVER_TIMEOUT_MS,
) -> SentinelGroup:
    """Start the six processes and wait until the group is ready to fail over (``down_after_ms``
    and ``failover_timeout_ms``: the Sentinels' timings, short by default for tests)."""
    group = SentinelGroup(
        workdir, tls=tls, acl=acl, down_after_ms=down_after_ms,
        failover_timeout_ms=failover_timeout_ms,
    )  # fmt: skip
    try:
        group.nodes.append(_data_node(group, 0, None))
        primary = group.nodes[0].port
        group.nodes += [_data_node(group, i, primary) for i in (1, 2)]
        group.sentinels += [_sentinel(group, i, primary) for i in range(3)]
        group.wait_ready()
    except BaseException:
        group.stop()
        raise
    return group
