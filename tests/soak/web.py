"""The soak's synthetic web (issue 37): many hosts on loopback, each with its own size, speed,
limit and failures, all drawn from one seed, so a soak is reproducible and its checkers know
every page that is reachable.

Hosts are loopback addresses (``127.77.x.y``, one listening socket each on one port), so each is
its own site to Scrapy and to the politeness budget, and a forward proxy reaches it as it would
reach a real one. A host's pages form a tree (page ``i`` links to ``B*i+1 … B*i+B``) plus a link
from every page to the root of another host, and each root links to the next host's root: every
page of every host is reachable from any root. Sizes are skewed (a few hosts hold most pages), so
are latencies; some hosts limit each client address (above ``limit`` requests in a second the
address is banned for ``ban`` seconds: 403, or 429 with ``Retry-After``), some answer slowly,
some fail a share of their requests with 500.

``python web.py --port P --hosts H --pages N --seed S --access-log FILE --admin-port A`` serves
the web until SIGTERM; it prints ``ready`` once every socket listens. Each answer appends one line
to the access log: ``time client host path status`` (what the soak's checkers read). On
``127.0.0.1:A``, ``POST /storm?host=H&seconds=S`` makes host H ban every address for S seconds
(the soak's ban storm).

With ``--domain D`` (the soak in the lab, whose hosts cannot reach another host's loopback) the
hosts are names instead, ``h<i>.D``, all served on one address (``--listen``) and told apart by
the request's Host header; the lab's hosts resolve them through ``/etc/hosts``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

BRANCHING = 4
BASE = (127, 77)  # hosts are 127.77.<i // 250>.<i % 250 + 1>
MAX_HOSTS = 250 * 250
# The admin port answers one request per connection and says so: a client that kept the
# connection for its next request would find it closed under it.
CLOSE = "Connection: close\r\n"


@dataclass(frozen=True)
class Host:
    """One synthetic site: how many pages, how fast, how it limits and how it fails."""

    index: int
    pages: int
    latency: float  # seconds before each answer
    limit: int  # requests per second per client address before a ban (0: no limit)
    ban: float  # seconds a banned address is refused
    retry_after: bool  # a ban answers 429 with Retry-After (else 403)
    fail: float  # share of requests answered 500
    size: int  # bytes of filler per page

    @property
    def address(self) -> str:
        return address(self.index)


def address(index: int) -> str:
    return f"{BASE[0]}.{BASE[1]}.{index // 250}.{index % 250 + 1}"


def index_of(host: str) -> int | None:
    """The host index of a ``127.77.x.y`` address, None for any other."""
    parts = host.split(".")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return None
    a, b, c, d = (int(p) for p in parts)
    if (a, b) != BASE or not 1 <= d <= 250:
        return None
    return c * 250 + d - 1


@dataclass(frozen=True)
class Web:
    """The whole web, drawn from ``seed``: ``hosts`` sites holding ``pages`` pages in all."""

    seed: int
    hosts: tuple[Host, ...]
    # Empty: each host is a loopback address. Else each is the name h<i>.<domain>, one address
    # serving them all (the lab: its hosts resolve the names through /etc/hosts).
    domain: str = ""

    @classmethod
    def draw(cls, hosts: int, pages: int, seed: int, domain: str = "") -> Web:
        if domain and not all(p.isascii() and p.isalnum() for p in domain.split(".")):
            raise ValueError(f"--domain must be dot-separated letters and digits, got {domain!r}")
        if not 1 <= hosts <= MAX_HOSTS:
            raise ValueError(f"--hosts must be from 1 to {MAX_HOSTS}, got {hosts}")
        if pages < hosts:
            raise ValueError(f"--pages must be at least --hosts ({hosts}), got {pages}")
        rng = random.Random(seed)
        weights = [rng.paretovariate(1.2) for _ in range(hosts)]  # a few hosts hold most pages
        total, rest = sum(weights), pages - hosts
        counts = [1 + int(rest * w / total) for w in weights]  # a page each, the rest by weight
        counts[weights.index(max(weights))] += pages - sum(counts)  # what rounding left over
        drawn = []
        for i, count in enumerate(counts):
            kind = rng.random()
            drawn.append(
                Host(
                    index=i,
                    pages=count,
                    latency=rng.uniform(0.5, 2.0) if kind < 0.02 else rng.uniform(0.002, 0.05),
                    limit=rng.choice((2, 5, 10, 20)) if 0.02 <= kind < 0.12 else 0,
                    ban=rng.choice((5.0, 10.0)),
                    retry_after=rng.random() < 0.5,
                    fail=0.05 if 0.12 <= kind < 0.15 else 0.0,
                    size=int(rng.lognormvariate(7, 1)),  # median ~1 KB, a long tail
                )
            )
        return cls(seed, tuple(drawn), domain.lower())

    def name(self, host: int) -> str:
        """Host ``host`` as URLs, the access log and the politeness budget name it."""
        return f"h{host}.{self.domain}" if self.domain else address(host)

    def index(self, name: str) -> int | None:
        """The host a name (or a loopback address) is, None for any other."""
        if not self.domain:
            return index_of(name)
        first, _, domain = name.lower().partition(".")
        number = first.removeprefix("h")
        # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts
        if domain != self.domain or first[:1] != "h" or not number.isdecimal():
            return None
        return int(number) if int(number) < len(self.hosts) and str(int(number)) == number else None

    def url(self, host: int, page: int, port: int) -> str:
        return f"http://{self.name(host)}:{port}{self.path(page)}"

    @staticmethod
    def path(page: int) -> str:
        return f"/p/{page}"

    def logged(self, host: int, page: int) -> str:
        """A page as the access log names it (its host's address and its path, no port): how
        the harness and the judging count the pages fetched."""
        return f"{self.name(host)}{self.path(page)}"

    def links(self, host: int, page: int) -> list[tuple[int, int]]:
        """``(host, page)`` of each link on a page: its children, another host's root and, on a
        root, the next host's root."""
        count = self.hosts[host].pages
        found = [(host, c) for c in range(BRANCHING * page + 1, BRANCHING * page + BRANCHING + 1)]
        found = [(h, c) for h, c in found if c < count]
        n = len(self.hosts)
        found.append(((host * 31 + page * 7 + 1) % n, 0))
        if page == 0:
            found.append(((host + 1) % n, 0))
        return list(dict.fromkeys(found))

    def parent(self, host: int, page: int) -> tuple[int, int] | None:
        """The one page linking to a page that is not a root (a root has many: None)."""
        return (host, (page - 1) // BRANCHING) if page > 0 else None

    def reachable(self) -> Iterator[tuple[int, int]]:
        """Every ``(host, page)``: all of them, by construction (the tests prove it by walking)."""
        for host in self.hosts:
            for page in range(host.pages):
                yield host.index, page

    def page(self, host: int, page: int, port: int) -> bytes:
        anchors = "".join(
            f'<a href="{self.url(h, p, port)}">{h}/{p}</a>\n' for h, p in self.links(host, page)
        )
        filler = "x" * self.hosts[host].size
        return (
            f"<!doctype html><html><head><title>{host}/{page}</title></head><body>"
            f"<h1>{host}/{page}</h1>\n{anchors}<p>{filler}</p></body></html>"
        ).encode()


class Limiter:
    """Per (host, client address): requests in the last second, and bans until a time; per
    host, a ban storm (every address refused) until a time."""

    def __init__(self) -> None:
        self.recent: dict[tuple[int, str], deque[float]] = defaultdict(deque)
        self.banned: dict[tuple[int, str], float] = {}
        self.storms: dict[int, float] = {}

    def storm(self, host: int, now: float, seconds: float) -> None:
        """From ``now`` on, ``host`` refuses every address for ``seconds``."""
        self.storms[host] = now + seconds

    def admit(self, host: Host, client: str, now: float) -> float:
        """0 when the request is admitted, else the seconds the address stays banned."""
        if now < (storm := self.storms.get(host.index, 0.0)):
            return storm - now
        if not host.limit:
            return 0.0
        key = (host.index, client)
        until = self.banned.get(key, 0.0)
        if now < until:
            return until - now
        recent = self.recent[key]
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        recent.append(now)
        if len(recent) > host.limit:
            self.banned[key] = now + host.ban
            recent.clear()
            return host.ban
        return 0.0


def _answer(status: int, body: bytes, extra: str = "") -> bytes:
    reason = {200: "OK", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests"}
    head = (
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\nContent-Type: text/html\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


class Server:
    """Serves ``web`` on ``port`` of every host's address; one access-log line per answer."""

    def __init__(self, web: Web, port: int, log: IO[str], seed: int) -> None:
        self.web, self.port, self.log = web, port, log
        self.limiter = Limiter()
        self.rng = random.Random(seed + 1)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local, client = writer.get_extra_info("sockname")[0], writer.get_extra_info("peername")[0]
        index = None if self.web.domain else index_of(local)
        try:
            while self.web.domain or index is not None:  # an address that is no host: closed
                request = await reader.readuntil(b"\r\n\r\n")
                parts = request.split(b" ", 2)
                path = parts[1].decode("latin-1") if len(parts) > 2 else ""
                if path.startswith("http://"):  # a forward proxy's absolute form
                    path = "/" + path.removeprefix("http://").partition("/")[2]
                if self.web.domain:  # named hosts: the Host header says which
                    index = self.web.index(_host_header(request))
                    if index is None:
                        writer.write(_answer(404, b"<h1>no such host</h1>", CLOSE))
                        await writer.drain()
                        break
                assert index is not None
                status, data = await self.respond(self.web.hosts[index], client, path)
                # logged before it is sent: a client that has its answer finds it in the log
                name = self.web.name(index)
                self.log.write(f"{time.time():.3f} {client} {name} {path} {status}\n")
                writer.write(data)
                await writer.drain()
                if b"connection: close" in request.lower():
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def respond(self, host: Host, client: str, path: str) -> tuple[int, bytes]:
        number = path.removeprefix("/p/")
        if not (path.startswith("/p/") and number.isdigit() and int(number) < host.pages):
            return 404, _answer(404, b"<h1>not found</h1>")
        banned = self.limiter.admit(host, client, time.monotonic())
        if banned:
            if host.retry_after:
                return 429, _answer(429, b"slow down", f"Retry-After: {max(1, round(banned))}\r\n")
            return 403, _answer(403, b"<h1>banned</h1>")
        await asyncio.sleep(host.latency)
        if host.fail and self.rng.random() < host.fail:
            return 500, _answer(500, b"<h1>internal error</h1>")
        return 200, _answer(200, self.web.page(host.index, int(number), self.port))


def _host_header(request: bytes) -> str:
    """The host named by a request's Host header, without its port ('' when it has none)."""
    for line in request.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "host":
            return value.strip().rpartition(":")[0] or value.strip()
    return ""


async def _admin(
    server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """``POST /storm?host=H&seconds=S`` on the admin port: host H bans every address for S s."""
    try:
        request = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        target = request.split(" ", 2)[1]
        query = dict(p.partition("=")[::2] for p in target.partition("?")[2].split("&") if p)
        host, seconds = int(query["host"]), float(query["seconds"])
        if not (target.startswith("/storm?") and 0 <= host < len(server.web.hosts) and seconds > 0):
            raise ValueError(target)
        server.limiter.storm(host, time.monotonic(), seconds)
        writer.write(_answer(200, b"storm", CLOSE))
    except (ValueError, KeyError, IndexError, asyncio.IncompleteReadError):
        writer.write(_answer(400, b"POST /storm?host=H&seconds=S", CLOSE))
    await writer.drain()
    writer.close()


async def serve(
    web: Web, port: int, access_log: Path, seed: int, admin_port: int, listen: str = ""
) -> None:
    with access_log.open("a", buffering=1) as log:
        server = Server(web, port, log, seed)
        addresses = [listen or "0.0.0.0"] if web.domain else [h.address for h in web.hosts]
        listening = await asyncio.start_server(
            server.handle, host=addresses, port=port, backlog=512
        )
        await asyncio.start_server(
            lambda r, w: _admin(server, r, w), host="127.0.0.1", port=admin_port
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print("ready", flush=True)
        async with listening:
            await stop.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--access-log", type=Path, required=True)
    parser.add_argument("--admin-port", type=int, required=True, help="127.0.0.1: ban storms")
    parser.add_argument(
        "--domain", default="", help="hosts named h<i>.DOMAIN (by the Host header), not addresses"
    )
    parser.add_argument("--listen", default="", help="with --domain: the address (0.0.0.0)")
    args = parser.parse_args(argv)
    try:
        web = Web.draw(args.hosts, args.pages, args.seed, args.domain)
    except ValueError as exc:
        print(f"web.py: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(web, args.port, args.access_log, args.seed, args.admin_port, args.listen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
