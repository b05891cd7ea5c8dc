"""A small HTTP forward proxy for the book tests: its outgoing connections leave from ``--source``.

Several of these on 127.0.0.1 ports with sources 127.0.0.2, .3, .4 look like three different
client addresses to the demo site, so its per-address bans hit one proxy, not the crawl.
Plain HTTP only (absolute-form requests, keep-alive with Content-Length bodies).

    python book_forward_proxy.py --port 9001 --source 127.0.0.2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from urllib.parse import urlsplit

HOP_BY_HOP = ("proxy-", "connection:", "keep-alive:")


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


class Upstream:
    def __init__(self, source: str) -> None:
        self.source = source
        self.key: tuple[str, int] | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.key != (host, port) or self.writer is None or self.writer.is_closing():
            self.close()
            self.reader, self.writer = await asyncio.open_connection(
                host, port, local_addr=(self.source, 0)
            )
            self.key = (host, port)
        assert self.reader is not None and self.writer is not None
        return self.reader, self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
        self.key = None


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str) -> None:
    upstream = Upstream(source)
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            url = urlsplit(target)
            if method == "CONNECT" or url.scheme != "http" or not url.hostname:
                writer.write(b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            length = _content_length(head) or 0
            body = await reader.readexactly(length) if length else b""
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            kept = [h for h in lines[1:] if h and not h.lower().startswith(HOP_BY_HOP)]
            request = "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "", ""]).encode("latin-1")
            rhead = b""
            # A reused upstream connection may have been closed by the server's idle timeout:
            # the second attempt uses a fresh connection.
            for _attempt in range(2):
                try:
                    up_reader, up_writer = await upstream.get(url.hostname, url.port or 80)
                    up_writer.write(request + body)
                    await up_writer.drain()
                    rhead = await up_reader.readuntil(b"\r\n\r\n")
                    break
                except (OSError, asyncio.IncompleteReadError):
                    upstream.close()
            if not rhead:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            rlength = _content_length(rhead)
            if rlength is None:
                # No length: the body ends when the server closes; so does this connection.
                writer.write(rhead + await up_reader.read())
                await writer.drain()
                return
            writer.write(rhead + await up_reader.readexactly(rlength))
            await writer.drain()
            if b"connection: close" in rhead.lower():
                upstream.close()
    finally:
        upstream.close()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def serve(port: int, source: str) -> None:
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, source), host="127.0.0.1", port=port
    )
    print(f"forward proxy on 127.0.0.1:{port}, outgoing from {source}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--source", default="127.0.0.1")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.source))


if __name__ == "__main__":
    main()
