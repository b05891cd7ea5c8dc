"""A TCP relay between one worker and the hub, which the soak can cut (issue 37: "cut one worker
from the hub for 30 s"), on loopback, without root or network namespaces.

While cut, nothing passes: bytes already on their way are held, new connections are accepted and
never answered, as when a network drops packets (the worker sees its hub go silent, not refuse).
When the cut heals, every connection that lived through it is closed, as a peer that timed out
would reset it: the worker reconnects. Runs its own event loop in a thread of the soak.

On three hubs a worker reaches the Sentinels and every data node through relays of its own: the
relay to a Sentinel rewrites, in what the Sentinel answers, each data node's port to the port of
the worker's relay to that node (``ports``), so the primary a Sentinel names is reached through
the worker's relay too, and a cut cuts all of it.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress

CHUNK = 65536


class Relay:
    """Listens on ``127.0.0.1:port`` and relays to ``target``; ``cut()`` and ``heal()``. With
    ``ports`` (a Sentinel's relay), each port of it the target answers as a RESP bulk string is
    answered as the port it maps to."""

    def __init__(
        self, port: int, target: tuple[str, int], ports: dict[int, int] | None = None
    ) -> None:
        self.port, self.target = port, target
        self.ports = {str(k).encode(): str(v).encode() for k, v in (ports or {}).items()}
        self.loop = asyncio.new_event_loop()
        self.open = asyncio.Event()
        self.writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"relay-{port}", daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"relay on {self.port} did not start")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.open.set()
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port)
        )
        self._ready.set()
        self.loop.run_forever()
        tasks = asyncio.all_tasks(self.loop)  # the connections' tasks, ended with the loop
        for task in tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    def cut(self) -> None:
        self.loop.call_soon_threadsafe(self.open.clear)

    def heal(self) -> None:
        def reopen() -> None:
            for writer in list(self.writers):
                writer.transport.abort()
            self.writers.clear()
            self.open.set()

        self.loop.call_soon_threadsafe(reopen)

    def stop(self) -> None:
        def close() -> None:
            self.server.close()
            for writer in list(self.writers):
                writer.transport.abort()
            self.loop.stop()

        self.loop.call_soon_threadsafe(close)
        self._thread.join(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            await self.open.wait()
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            self.writers.discard(writer)
            return
        self.writers.add(up_writer)
        answers = self._pipe(up_reader, writer, Rewrite(self.ports) if self.ports else None)
        await asyncio.gather(self._pipe(reader, up_writer), answers, return_exceptions=True)
        for w in (writer, up_writer):
            self.writers.discard(w)
            w.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        rewrite: Rewrite | None = None,
    ) -> None:
        with suppress(ConnectionError, OSError):
            while data := await reader.read(CHUNK):
                await self.open.wait()  # held while cut
                if writer.transport.is_closing():
                    return
                writer.write(rewrite(data) if rewrite else data)
                await writer.drain()
        writer.transport.abort()


class Rewrite:
    """Rewrites a RESP stream's bulk strings that are keys of ``ports`` to their values, parsing
    the stream (a value inside another bulk string is left alone). What a read ends in the middle
    of is held back until its end arrives; a whole answer is never held."""

    def __init__(self, ports: dict[bytes, bytes]) -> None:
        self.ports, self.held = ports, b""

    def __call__(self, data: bytes) -> bytes:
        data, out, at = self.held + data, [], 0
        while (eol := data.find(b"\r\n", at)) >= 0:
            line = data[at : eol + 2]
            if line[:1] == b"$" and line[1:-2].isdigit():  # a bulk string (not $-1, a null)
                end = eol + 2 + int(line[1:-2]) + 2
                if end > len(data):
                    break
                value = data[eol + 2 : end - 2]
                value = self.ports.get(value, value)
                out.append(b"$%d\r\n%s\r\n" % (len(value), value))
                at = end
            else:  # an array's, integer's, simple string's or error's line
                out.append(line)
                at = eol + 2
        self.held = data[at:]
        return b"".join(out)
