"""Fixtures for the proxy pool: real forward proxies, an echo site and the service, all on loopback.

- ``echo_site``: an HTTP server on 127.0.0.1 that answers with the caller's address and any
  forwarding headers (what the anonymity check reads); ``/status/N`` answers status N,
  ``?delay=S`` waits first; it records how many requests were in flight at most.
- ``proxy_farm``: small asyncio forward proxies (absolute-URI HTTP and CONNECT) on 127.0.0.x;
  each connects upstream from its own address, so the echo site sees which proxy was used.
  ``transparent=True`` adds ``X-Forwarded-For`` (not anonymous); ``silent=True`` accepts and
  never answers (a hanging proxy).
- ``tinyproxy``: Debian's tinyproxy with a generated config on 127.0.0.5.
- ``dead_proxy``: a free port on 127.0.0.9 with nothing listening.
- ``https_echo_site``: the echo site over TLS, its certificate trusted through SSL_CERT_FILE.
- ``pool_service``: ``crawlfleet proxypool …`` as a subprocess with an API key; ``.stop()``
  sends SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from proxypool_helpers import (
    EchoSite,
    PoolProcess,
    ProxyFarm,
    echo_handler,
    make_certificate,
)
from support.net import free_port
from support.services import start_process, stop_process, wait_healthy, wait_listening
from support.sites import serve_http

API_KEY = "proxypool-test-key-0123"


def _serve_echo(certificate: tuple[Path, Path] | None = None) -> Iterator[EchoSite]:
    ref: list[EchoSite] = []
    context = None
    if certificate is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*certificate)
    with serve_http(echo_handler(ref), tls=context) as server:
        ref.append(EchoSite(server, "https" if context else "http"))
        yield ref[0]


@pytest.fixture
def echo_site() -> Iterator[EchoSite]:
    yield from _serve_echo()


@pytest.fixture
def https_echo_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EchoSite]:
    """The echo site over TLS; its self-signed certificate is trusted through SSL_CERT_FILE."""
    certificate = make_certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    yield from _serve_echo(certificate)


@pytest.fixture
def proxy_farm() -> Iterator[ProxyFarm]:
    farm = ProxyFarm()
    yield farm
    farm.close()


@pytest.fixture
def dead_proxy() -> str:
    """A proxy address where nothing listens (the port was free a moment ago)."""
    return f"http://127.0.0.9:{free_port('127.0.0.9')}"


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[str]:
    """Debian's tinyproxy on 127.0.0.5 (no Via header, loopback clients only)."""
    host, port = "127.0.0.5", free_port("127.0.0.5")
    conf = tmp_path / "tinyproxy.conf"
    conf.write_text(
        f"Port {port}\nListen {host}\nBind {host}\nTimeout 10\nMaxClients 20\n"
        f"Allow 127.0.0.0/8\nDisableViaHeader Yes\nLogLevel Error\n"
        f'LogFile "{tmp_path / "tinyproxy.log"}"\nPidFile "{tmp_path / "tinyproxy.pid"}"\n'
    )
    binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
    process = start_process([binary, "-d", "-c", str(conf)], tmp_path / "tinyproxy.out")
    try:
        wait_listening(process, host, port, tmp_path / "tinyproxy.log")
        yield f"http://{host}:{port}"
    finally:
        stop_process(process)


@pytest.fixture
def pool_service(tmp_path: Path) -> Iterator[Callable[..., PoolProcess]]:
    """Start ``crawlfleet-proxypool <command> <args>``; waits until /health answers (for serve)."""
    started: list[PoolProcess] = []

    def start(*args: str, command: str = "serve") -> PoolProcess:
        port = free_port("127.0.0.1")
        log_path = tmp_path / f"pool-{len(started)}.log"
        # The operator's entry point: `crawlfleet proxypool ...` from the venv.
        argv = [str(Path(sys.executable).parent / "crawlfleet"), "proxypool", command, *args]
        if command == "serve":
            argv += ["--port", str(port)]
        clean_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PROXYPOOL_") and k != "REDIS_URL"
        }
        clean_env["PROXYPOOL_API_KEY"] = API_KEY
        process = start_process(argv, log_path, env=clean_env)
        pool = PoolProcess(process, port, log_path, API_KEY)
        started.append(pool)
        if command == "serve":
            wait_healthy(process, f"{pool.url}/health", log_path, timeout=15)
        return pool

    yield start
    for pool in started:
        stop_process(pool.process, sig=signal.SIGKILL)
