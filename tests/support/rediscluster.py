"""A Redis Cluster on loopback for the cluster tests: six ``redis-server --cluster-enabled yes``
processes on free ports (three primaries, three replicas; the shards bench asks for none), joined
by ``redis-cli --cluster create … --cluster-replicas 1``, with a short ``cluster-node-timeout`` so
a killed primary fails over in a few seconds; every file in a temporary directory.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.crc import key_slot

from support.net import free_port
from support.services import log_tail, start_process, stop_process, wait_listening
from support.waiting import wait_until

from redis_server import server_binary

PASSWORD = "cluster-test-pw-0123"
NODE_TIMEOUT_MS = 1000
PRIMARIES = 3


@dataclass
class ClusterNode:
    """One redis-server of the cluster."""

    port: int
    bus_port: int
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class RedisClusterGroup:
    """Six cluster nodes on loopback; ``url`` reaches them through any of the first three."""

    workdir: Path
    password: str = PASSWORD
    nodes: list[ClusterNode] = field(default_factory=list)

    def url(self, seeds: int = 3) -> str:
        """The clients' ``redis+cluster://`` URL, naming ``seeds`` start-up nodes."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:seeds])
        return f"redis+cluster://:{self.password}@{hosts}/0"

    def node_client(self, port: int) -> redis.Redis:
        """A plain client of one node (it answers MOVED for slots it does not serve)."""
        return redis.Redis(port=port, password=self.password, socket_timeout=2)

    def client(self) -> redis.RedisCluster:
        """A cluster client of the whole group (the tests' own, not the code under test's)."""
        return redis.RedisCluster(
            host="127.0.0.1", port=self.live()[0].port, password=self.password, socket_timeout=2
        )

    def live(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.alive()]

    def info(self, port: int) -> dict[str, str]:
        """``CLUSTER INFO`` of one node, as a dict."""
        reply = self.node_client(port).execute_command("CLUSTER", "INFO")
        text = reply.decode() if isinstance(reply, bytes) else str(reply)
        pairs = (line.partition(":") for line in text.splitlines())
        return {name: value.strip() for name, colon, value in pairs if colon}

    def slot_owner(self, key: str) -> int:
        """The port of the primary serving ``key``'s slot, as a live node sees it now."""
        slot = key_slot(key.encode())
        ranges = self.node_client(self.live()[0].port).execute_command("CLUSTER", "SLOTS")
        for start, end, primary, *_ in ranges:
            if start <= slot <= end:
                return int(primary[1])
        raise AssertionError(f"no node serves slot {slot}")

    def _owner_or_none(self, key: str) -> int | None:
        try:
            return self.slot_owner(key)
        except (redis.RedisError, AssertionError):
            return None

    def healthy(self) -> bool:
        """Every live node: state ok, all nodes known; every primary with an online replica."""
        try:
            for node in self.live():
                info = self.info(node.port)
                if info.get("cluster_state") != "ok":
                    return False
                if int(info.get("cluster_known_nodes", 0)) != len(self.nodes):
                    return False
                if int(info.get("cluster_slots_assigned", 0)) != 16384:
                    return False
                replication = self.node_client(node.port).info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
        except (redis.RedisError, ValueError):
            return False
        return True

    def wait_ready(self, timeout: float = 60) -> None:
        wait_until(self.healthy, "the cluster: every node ok, replicas in sync", timeout)

    def kill_primary_of(self, key: str) -> int:
        """SIGKILL the primary serving ``key``'s slot; its port."""
        port = self.slot_owner(key)
        node = next(n for n in self.nodes if n.port == port)
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(timeout=10)
        return port

    def wait_failover(self, key: str, old_port: int, timeout: float = 60) -> int:
        """Until a replica of ``old_port`` serves ``key``'s slot, as a primary, the cluster ok."""

        def switched() -> bool:
            owner = self._owner_or_none(key)
            if owner is None or owner == old_port:
                return False
            try:
                role = self.node_client(owner).info("replication")["role"]
                states = {self.info(n.port).get("cluster_state") for n in self.live()}
            except redis.RedisError:
                return False
            return role == "master" and states == {"ok"}

        wait_until(switched, f"a replica of :{old_port} to take its slots", timeout, 0.02)
        return self.slot_owner(key)

    def primaries(self) -> list[int]:
        """The ports of the live nodes that are primaries now."""
        roles = {n.port: self.node_client(n.port).info("replication")["role"] for n in self.live()}
        return [port for port, role in roles.items() if role == "master"]

    def flush(self) -> None:
        """Empty every primary and wait until its replicas are empty too."""
        for port in self.primaries():
            self.node_client(port).flushall()
        wait_until(
            lambda: all(self.node_client(n.port).dbsize() == 0 for n in self.live()),
            "every node of the cluster to be empty",
            30,
        )

    def keys_by_node(self) -> dict[int, list[str]]:
        """Every key each live primary holds (the tests' crawls are small)."""
        return {
            port: sorted(k.decode() for k in self.node_client(port).scan_iter(count=1000))
            for port in self.primaries()
        }

    def restart(self, port: int) -> None:
        """Start a stopped node again on its own files: it rejoins (a replica after a failover)."""
        index = next(i for i, n in enumerate(self.nodes) if n.port == port)
        old = self.nodes[index]
        assert not old.alive(), f"node :{port} is still running"
        workdir = old.log.parent
        process = start_process(_argv(self, workdir, port, old.bus_port), old.log, cwd=workdir)
        wait_listening(process, "127.0.0.1", port, old.log, timeout=10)
        self.nodes[index] = ClusterNode(port, old.bus_port, process, old.log)

    def stop(self) -> None:
        for node in self.nodes:
            stop_process(node.process, timeout=5)


def _cli() -> str:
    return shutil.which("redis-cli") or shutil.which("valkey-cli") or "/usr/bin/redis-cli"


def _argv(group: RedisClusterGroup, workdir: Path, port: int, bus: int) -> list[str]:
    return [
        server_binary(),
        "--port", str(port),
        "--cluster-enabled", "yes",
        "--cluster-port", str(bus),
        "--cluster-config-file", str(workdir / "nodes.conf"),
        "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        # a replica takes over however long it was cut off: the tests' failovers must happen
        "--cluster-replica-validity-factor", "0",
        "--bind", "127.0.0.1",
        "--dir", str(workdir),
        "--save", "",
        "--appendonly", "yes",
        "--requirepass", group.password,
        "--masterauth", group.password,
        "--daemonize", "no",
    ]  # fmt: skip


def _node(group: RedisClusterGroup, index: int) -> ClusterNode:
    port, bus = free_port(), free_port()
    workdir = group.workdir / f"node{index}"
    workdir.mkdir(parents=True)
    log = workdir / "redis.log"
    process = start_process(_argv(group, workdir, port, bus), log, cwd=workdir)
    wait_listening(process, "127.0.0.1", port, log, timeout=10)
    return ClusterNode(port, bus, process, log)


def start_redis_cluster(workdir: Path, timeout: float = 60, replicas: int = 1) -> RedisClusterGroup:
    """Start three primaries with ``replicas`` replicas each (six nodes by default), join them,
    wait until ready."""
    group = RedisClusterGroup(workdir)
    try:
        for i in range(PRIMARIES * (1 + replicas)):
            # one at a time: a node that fails to start stops the ones already running
            group.nodes.append(_node(group, i))
        addresses = [f"127.0.0.1:{n.port}" for n in group.nodes]
        create = [_cli(), "-a", group.password, "--no-auth-warning", "--cluster", "create"]
        create += [*addresses, "--cluster-replicas", str(replicas), "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise AssertionError(
                f"redis-cli --cluster create failed ({done.returncode}): "
                f"{(done.stdout + done.stderr)[-2000:]}\n{log_tail(group.nodes[0].log)}"
            )
        group.wait_ready(timeout)
    except BaseException:
        group.stop()
        raise
    return group
