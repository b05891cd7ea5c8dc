"""A TCP relay between one worker and the hub, which the soak can cut (issue 37: "cut one worker
from the hub for 30 s"), on loopback, without root or network namespaces.

While cut, nothing passes: bytes already on their way are held, new connections are accepted and
never answered, as when a network drops packets (the worker sees its hub go silent, not refuse).
When the cut heals, every connection that lived through it is closed, as a peer that timed out
would reset it: the worker reconnects. Runs its own event loop in a thread of the soak.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress

CHUNK = 65536


class Relay:
    """Listens on ``127.0.0.1:port`` and relays to ``target``; ``cut()`` and ``heal()``."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port, self.target = port, target
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
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            self.writers.discard(w)
            w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(ConnectionError, OSError):
            while data := await reader.read(CHUNK):
                await self.open.wait()  # held while cut
                if writer.transport.is_closing():
                    return
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
