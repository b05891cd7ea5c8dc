"""Helpers for the proxy pool tests: forward proxies, an echo site, the service as a process."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import uvicorn
from support.sites import QuietHandler, serve_http, url_of
from support.waiting import wait_until

from crawlfleet.proxypool.api import create_app
from crawlfleet.proxypool.config import Settings
from crawlfleet.proxypool.store import ProxyStore, connect

# ---------------------------------------------------------------- echo site


@dataclass
class EchoSite:
    server: ThreadingHTTPServer
    scheme: str = "http"
    in_flight: int = 0
    max_in_flight: int = 0
    clients: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"


def echo_handler(site_ref: list[EchoSite]) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            site = site_ref[0]
            parts = urlsplit(self.path)
            with site.lock:
                site.in_flight += 1
                site.max_in_flight = max(site.max_in_flight, site.in_flight)
                site.clients.append(self.client_address[0])
            try:
                delay = float(parse_qs(parts.query).get("delay", ["0"])[0])
                time.sleep(delay)
                status = int(parts.path.split("/")[2]) if parts.path.startswith("/status/") else 200
                lines = [f"origin: {self.client_address[0]}"]
                for name in ("X-Forwarded-For", "Via", "Forwarded"):
                    if self.headers.get(name):
                        lines.append(f"{name.lower()}: {self.headers[name]}")
                self.reply(status, ("\n".join(lines) + "\n").encode(), "text/plain")
            finally:
                with site.lock:
                    site.in_flight -= 1

    return Handler


# ---------------------------------------------------------------- forward proxies


@dataclass
class ForwardProxy:
    host: str
    port: int
    server: asyncio.Server
    requests: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


class ProxyFarm:
    """Forward proxies served by one event loop in a background thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxies: list[ForwardProxy] = []

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)  # type: ignore[arg-type]

    def start(
        self, host: str = "127.0.0.2", transparent: bool = False, silent: bool = False
    ) -> ForwardProxy:
        async def open_server() -> ForwardProxy:
            holder: list[ForwardProxy] = []

            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                holder[0].requests += 1
                await self._serve(holder[0], reader, writer, transparent, silent)

            server = await asyncio.start_server(handle, host, 0)
            proxy = ForwardProxy(host, server.sockets[0].getsockname()[1], server)
            holder.append(proxy)
            return proxy

        proxy = self._call(open_server())
        assert isinstance(proxy, ForwardProxy)
        self.proxies.append(proxy)
        return proxy

    def stop(self, proxy: ForwardProxy) -> None:
        """Stop accepting: from now on the proxy refuses connections, as a dead one does."""

        async def close() -> None:
            proxy.server.close()

        self._call(close())

    async def _serve(
        self,
        proxy: ForwardProxy,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        transparent: bool,
        silent: bool,
    ) -> None:
        try:
            request_line = (await reader.readline()).decode("latin-1").strip()
            headers: list[tuple[str, str]] = []
            while (line := (await reader.readline()).decode("latin-1").strip()) != "":
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
            if silent:
                await asyncio.sleep(3600)
                return
            method, target, _ = request_line.split(" ", 2)
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                target_host, target_port, first = host, int(port), b""
            else:
                url = urlsplit(target)
                target_host, target_port = url.hostname or "", url.port or 80
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                kept = [
                    (n, v) for n, v in headers if not n.lower().startswith(("proxy-", "connection"))
                ]
                if transparent:
                    kept.append(("X-Forwarded-For", writer.get_extra_info("peername")[0]))
                kept.append(("Connection", "close"))
                head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in kept)
                first = (head + "\r\n").encode("latin-1")
            # Test traffic never leaves loopback.
            if not ipaddress.ip_address(target_host).is_loopback:
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            up_reader, up_writer = await asyncio.open_connection(
                target_host, target_port, local_addr=(proxy.host, 0)
            )
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(first)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        async def close_all() -> None:
            for proxy in self.proxies:
                proxy.server.close()
            current = asyncio.current_task()
            pending = [t for t in asyncio.all_tasks() if t is not current]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        self._call(close_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


# ---------------------------------------------------------------- the service as a process


@dataclass
class PoolProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    api_key: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key}

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)


# ---------------------------------------------------------------- the API in a thread


@contextlib.contextmanager
def serve_app_in_thread(settings: Settings) -> Iterator[str]:
    """Serve ``create_app(settings)`` with uvicorn on a free loopback port; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config("", log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)

    async def serve() -> None:
        client = connect(settings.redis_url)
        config.app = create_app(settings, ProxyStore(client, settings.redis_key, settings.max_size))
        try:
            await server.serve(sockets=[sock])
        finally:
            await client.aclose()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    wait_until(lambda: server.started, "uvicorn to start", timeout=10, interval=0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


# ---------------------------------------------------------------- a provider answering proxy lists


@contextlib.contextmanager
def list_site(pages: dict[str, tuple[int, str]]) -> Iterator[str]:
    """Serve ``{path: (status, body)}`` on 127.0.0.1; yields the base URL."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            status, text = pages.get(urlsplit(self.path).path, (404, "not found"))
            self.reply(status, text.encode(), "text/plain")

    with serve_http(Handler) as server:
        yield url_of(server)


# ---------------------------------------------------------------- an HTTPS echo site


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA); returns (cert, key) paths."""
    import datetime
    import ipaddress as ip

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawlfleet test site")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ip.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "site.pem", directory / "site.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
