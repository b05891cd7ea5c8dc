"""A real rabbitmq-server on free loopback ports, owned by a test session or a benchmark.

Imported under this unique name by tests and tests/bench (like redis_server.py). Everything the
broker writes (Mnesia database, logs, Erlang cookie) lives in the given directory; it runs its own
``epmd`` on a free port, loads no plugins, and listens on 127.0.0.1 only. Erlang boots slowly on a
loaded machine (20-40 s), so tests share one broker per session and restart it only when a test
needs a restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pika.exceptions
from support.net import free_port
from support.services import log_tail
from support.waiting import wait_or_stop, wait_until

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
EPMD = "/usr/bin/epmd"
BOOT_TIMEOUT = 120.0


@dataclass
class RabbitServer:
    """A broker process; ``url`` is an ``amqp://`` URL for its default vhost."""

    workdir: Path
    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    epmd_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    epmd: subprocess.Popen[bytes] | None = None

    @property
    def node(self) -> str:
        return f"cf{self.port}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def env(self) -> dict[str, str]:
        w = self.workdir
        return {
            **os.environ,
            "HOME": str(w),  # the Erlang cookie goes here
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(w / "mnesia"),
            "RABBITMQ_LOG_BASE": str(w / "log"),
            "RABBITMQ_CONFIG_FILE": str(w / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(w / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(w / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(w / "rabbitmq.pid"),
            # one scheduler thread per core is plenty for tests and keeps boot quicker
            "RABBITMQ_SERVER_START_ARGS": "+S 2:2 +A 8",
        }

    def start(self) -> None:
        """(Re)start on the same ports and database, so durable queues and messages survive."""
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        (w / "enabled_plugins").write_text("[].\n")
        (w / "rabbitmq-env.conf").write_text("")
        (w / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "loopback_users.guest = true\n"
            "log.console = false\n"
            "log.file.level = warning\n"
        )
        if self.epmd is None or self.epmd.poll() is not None:
            self.epmd = subprocess.Popen(
                [EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        with (w / "server.out").open("ab") as out:
            self.process = subprocess.Popen(
                [SERVER],
                env=self.env(),
                cwd=w,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # stop() signals the whole group (the script and beam)
            )
        self.wait_ready()

    def wait_ready(self) -> None:
        params = pika.URLParameters(self.url + "?connection_attempts=1&socket_timeout=2")

        def accepts() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                output = log_tail(self.workdir / "server.out", 2000)
                error = PortTaken if "eaddrinuse" in output else RuntimeError
                raise error("rabbitmq-server exited while booting:\n" + output)
            try:
                pika.BlockingConnection(params).close()
            except pika.exceptions.AMQPError:
                return False
            return True

        wait_or_stop(accepts, "rabbitmq-server to accept connections", BOOT_TIMEOUT, self.stop, 0.5)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the broker (a clean shutdown keeps durable queues and persistent messages)."""
        if not self.running():
            return
        assert self.process is not None
        pidfile = self.workdir / "rabbitmq.pid"
        beam = int(pidfile.read_text().strip() or 0) if pidfile.exists() else 0
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        # The script may exit before the Erlang VM has written its queues and let go of the port.
        if beam:
            wait_until(lambda: not _alive(beam), "the Erlang VM to exit", timeout=60, interval=0.1)
        pidfile.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop the broker and its epmd."""
        self.stop()
        if self.epmd is not None and self.epmd.poll() is None:
            self.epmd.terminate()
            self.epmd.wait(timeout=10)

    def connection(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.url))


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has let go of everything


class PortTaken(RuntimeError):
    """The broker found one of its free ports taken by the time it bound it (a busy machine)."""


def start_rabbitmq(workdir: Path, attempts: int = 3) -> RabbitServer:
    """A booted broker; a port another process took between choosing and binding it is chosen
    again (a free port is only free until somebody binds it, and parallel work binds many)."""
    for attempt in range(attempts):
        server = RabbitServer(workdir)
        try:
            server.start()
            return server
        except PortTaken:
            server.close()
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
