"""The frontier benchmark's target: ``frontier_bench_site.py PORT PAGES LATENCY_MS``.

An asyncio HTTP/1.1 server on 127.0.0.1 that answers ``/p/<i>`` after LATENCY_MS with a page
linking to its ten children ``/p/<10i+1>`` … ``/p/<10i+10>`` (below PAGES), its parent and the
root (two duplicates per page). It runs in its own process so the crawler under test does not
share a GIL with it. It prints ``ready`` once listening.
"""

from __future__ import annotations

import asyncio
import sys


def page(i: int, pages: int) -> bytes:
    links = [f"/p/{c}" for c in range(10 * i + 1, 10 * i + 11) if c < pages]
    links += [f"/p/{max(0, (i - 1) // 10)}", "/p/0"]
    body = "".join(f'<a href="{h}">{h}</a>' for h in links)
    return f"<html><body>{body}</body></html>".encode()


async def main(port: int, pages: int, latency: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                await asyncio.sleep(latency)
                parts = path.strip("/").split("/")
                if len(parts) == 2 and parts[0] == "p" and parts[1].isdigit():
                    status, body = "200 OK", page(int(parts[1]), pages)
                else:
                    status, body = "404 Not Found", b"not found"
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: text/html\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=256)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000))
