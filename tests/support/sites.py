"""Web sites for tests: an HTTP server on loopback, served from a thread while a test needs it,
and a quiet request handler that answers in one call."""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with one call to ``reply``."""

    def reply(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_http(
    handler: type[BaseHTTPRequestHandler],
    *,
    tls: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
) -> Iterator[ThreadingHTTPServer]:
    """``handler`` on a free port of ``host`` (over TLS with ``tls``); shut down on exit."""
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url_of(server: ThreadingHTTPServer, scheme: str = "http") -> str:
    """The server's base URL, ``scheme://host:port``."""
    host, port = server.server_address[:2]
    return f"{scheme}://{host!s}:{port}"
