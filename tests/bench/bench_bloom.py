"""Bloom dupefilter benchmark: crawlfleet vs scrapy-redis-bloomfilter 0.8.1 vs scrapy-redis's set.

All three run on the same kind of fresh redis-server in one run; the peers run in
``ctx.peer_python`` (their own venv) through their own dupefilter classes' ``request_seen``, with
the fingerprint given (random 20-byte digests, hex for the peers as they store them), so only the
Redis side is compared.

* checks/s: ``request_seen`` of new fingerprints, one at a time, one client.
* round trips per new / duplicate fingerprint: counted on the wire by a loopback TCP relay between
  client and Redis. A round trip is a client->server transmission that follows a server reply
  (or the start): a pipelined batch is one, each blocking call is one. The connection set-up is
  subtracted by running the same client with zero fingerprints.
* Redis commands per check: ``total_commands_processed`` from ``INFO stats`` (Lua's inner calls
  count too).
* memory per fingerprint: ``used_memory`` from ``INFO memory`` before and after adding N
  fingerprints to an empty server (N = 1,000,000; 100,000 in quick mode).
* false-positive rate at the same m and k (m = 2^20, k = 6, at the load where theory gives 1 %),
  measured with fresh probes, for crawlfleet and for scrapy-redis-bloomfilter's hash functions.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import selectors
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import redis
from benchrow import Section
from support.waiting import wait_until

from crawlfleet.frontier.bloom import BloomFilter
from crawlfleet.frontier.bloomlayout import expected_error_rate
from crawlfleet.frontier.dupefilter import BloomDupeFilter

ROOT = Path(__file__).resolve().parents[2]

SECTION = "bloom dupefilter"
_row = Section(SECTION).row
OURS = "crawlfleet BloomDupeFilter"
BOOK = "scrapy-redis-bloomfilter 0.8.1"
SET = "scrapy-redis 0.9.1 set (SADD)"

# Runs in the peers' venv, started once (importing Scrapy is slow): one JSON request per stdin
# line {url, kind, key, count, seed, bit, hashes, mode}, one JSON answer per stdout line.
PEER = r"""
import json, random, sys, time
import redis
from scrapy_redis.dupefilter import RFPDupeFilter as SetDupeFilter
from scrapy_redis_bloomfilter.dupefilter import RFPDupeFilter as BloomDupeFilter


def serve(a):
    client = redis.Redis.from_url(a["url"])
    client.ping()
    data = random.Random(a["seed"]).randbytes(20 * a["count"])
    fps = [data[i:i + 20].hex() for i in range(0, len(data), 20)]
    if a["kind"] == "bloomfilter":
        df = BloomDupeFilter(client, a["key"], False, a["bit"], a["hashes"])
    else:
        df = SetDupeFilter(client, a["key"])
    # The fingerprint is given: measure the Redis side of request_seen only.
    df.request_fingerprint = lambda request: request
    out = {}
    if a["mode"] == "seen":
        started = time.perf_counter()
        out["seen"] = sum(bool(df.request_seen(fp)) for fp in fps)
        out["seconds"] = time.perf_counter() - started
    elif a["mode"] == "fill":
        # Its own hash functions, its bits written in pipelines (same bits as insert(), faster).
        bf = df.bf
        for start in range(0, len(fps), 2000):
            pipe = client.pipeline(transaction=False)
            for fp in fps[start:start + 2000]:
                for f in bf.maps:
                    pipe.setbit(bf.key, f.hash(fp), 1)
            pipe.execute()
    elif a["mode"] == "probe":
        bf, present = df.bf, 0
        k = len(bf.maps)
        for start in range(0, len(fps), 2000):
            pipe = client.pipeline(transaction=False)
            for fp in fps[start:start + 2000]:
                for f in bf.maps:
                    pipe.getbit(bf.key, f.hash(fp))
            bits = pipe.execute()
            present += sum(all(bits[i:i + k]) for i in range(0, len(bits), k))
        out["present"] = present
    client.close()
    return out


for line in sys.stdin:
    print(json.dumps(serve(json.loads(line))), flush=True)
"""


class Peer:
    """The peers' side in their own venv: one long-lived process answering JSON requests."""

    def __init__(self, ctx: Any) -> None:
        self.log = Path(ctx.workdir) / "bench_bloom_peer.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(ctx.peer_python), "-c", PEER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    def __call__(self, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer failed: {self.log.read_text()[-2000:]}")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


class RoundTripRelay:
    """A loopback TCP relay to Redis that counts request/response turns per client connection."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.turns = 0
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, server)
        sel.register(server, selectors.EVENT_READ, client)
        replied = True  # the first client bytes start a turn
        try:
            while True:
                for key, _ in sel.select():
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(65536)
                    if not data:
                        return
                    if src is client:
                        if replied:
                            with self._lock:
                                self.turns += 1
                            replied = False
                    else:
                        replied = True
                    key.data.sendall(data)
        finally:
            client.close()
            server.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


class _Identity:
    """A request fingerprinter for the benchmark: the 'request' already is the fingerprint."""

    def fingerprint(self, request: Any) -> bytes:
        return bytes(request)


def _empty(server: Any) -> None:
    """FLUSHALL, then rewrite the AOF: the harness reuses server directories between runs, and a
    start would otherwise replay every earlier run's writes."""
    client = server.client()
    client.flushall()
    with contextlib.suppress(redis.ResponseError):  # a rewrite is running: wait for it below
        client.bgrewriteaof()

    def rewritten() -> bool:
        state = client.info("persistence")
        return not state["aof_rewrite_in_progress"] and not state["aof_rewrite_scheduled"]

    wait_until(rewritten, "the AOF rewrite", timeout=120)
    client.close()


_servers: list[Any] = []


def _fresh_redis(ctx: Any) -> Any:
    """A server from the harness, empty; emptied again when the module's run ends."""
    server = ctx.start_redis()
    _empty(server)
    _servers.append(server)
    return server


def _fps(count: int, seed: int) -> list[bytes]:
    data = random.Random(seed).randbytes(20 * count)
    return [data[i : i + 20] for i in range(0, len(data), 20)]


def _ours(url: str, key: str, **sizing: Any) -> BloomDupeFilter:
    client = redis.Redis.from_url(url)
    client.ping()
    bf = BloomFilter(client, key, **sizing)
    df = BloomDupeFilter(client, bf.layout, _Identity())  # type: ignore[arg-type]
    df.open()
    return df


def _commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def bench_speed(ctx: Any, peer: Peer, rows: list[dict[str, Any]]) -> None:
    """checks/s and Redis commands per check, all at m = 2^24 bits and k = 6 (the peer's sizing)."""
    server = _fresh_redis(ctx)
    admin = server.client()
    n_ours, n_book = (500, 100) if ctx.quick else (5000, 1000)
    sizing = {"capacity": 1_000_000, "bit": 24, "hash_number": 6}
    note = "m = 2^24, k = 6; request_seen of new fingerprints, one client"

    df = _ours(server.url, "ours:bloomfilter", **sizing)
    fps = _fps(n_ours, seed=1)
    before = _commands(admin)
    started = time.perf_counter()
    seen = sum(df.request_seen(fp) for fp in fps)  # type: ignore[arg-type]
    ours_rate = n_ours / (time.perf_counter() - started)
    ours_commands = (_commands(admin) - before - 1) / n_ours  # minus the first INFO
    rows.append(_row(OURS, "checks/s", ours_rate, "1/s", f"{note}; {seen} false positives"))

    batch = _fps(10 * 1000, seed=2)
    started = time.perf_counter()
    for i in range(0, len(batch), 1000):
        df.bloom.add_many(batch[i : i + 1000])
    rows.append(
        _row(
            OURS,
            "checks/s with add_many(1000)",
            len(batch) / (time.perf_counter() - started),
            "1/s",
            "one round trip per batch of 1000",
        )
    )

    def peer_seen(kind: str, count: int, seed: int) -> tuple[dict[str, Any], float]:
        """Run the peer's request_seen; commands per check without its connection set-up."""
        common = {"url": server.url, "kind": kind, "key": f"{kind}:key", "bit": 24, "hashes": 6}
        before = _commands(admin)
        peer(**common, count=0, seed=seed, mode="seen")
        setup = _commands(admin) - before - 1  # the INFO call itself
        before = _commands(admin)
        result = peer(**common, count=count, seed=seed, mode="seen")
        return result, (_commands(admin) - before - setup - 1) / count

    book, book_commands = peer_seen("bloomfilter", n_book, seed=3)
    book_rate = n_book / book["seconds"]
    rows.append(_row(BOOK, "checks/s", book_rate, "1/s", note))

    sadd, set_commands = peer_seen("set", n_ours, seed=4)
    rows.append(
        _row(
            SET,
            "checks/s",
            n_ours / sadd["seconds"],
            "1/s",
            "request_seen of new fingerprints, one client",
        )
    )
    rows.append(
        _row(
            OURS, "checks/s vs scrapy-redis-bloomfilter", ours_rate / book_rate, "x", "target >= 10"
        )
    )
    for scenario, value in ((OURS, ours_commands), (BOOK, book_commands), (SET, set_commands)):
        rows.append(
            _row(
                scenario,
                "Redis commands per new fingerprint",
                value,
                "commands",
                "INFO stats total_commands_processed; Lua's inner calls count",
            )
        )


def bench_round_trips(ctx: Any, peer: Peer, rows: list[dict[str, Any]]) -> None:
    server = _fresh_redis(ctx)
    relay = RoundTripRelay(server.port)
    count = 100
    try:
        # crawlfleet, in this process: set-up (connect, checks) happens before counting.
        df = _ours(relay.url, "ours:bloomfilter", capacity=100_000, error_rate=0.001)
        fps = _fps(count, seed=5)
        # Warm up: the first call of each script loads it into Redis (NOSCRIPT, SCRIPT LOAD).
        warm = _fps(1, seed=9)
        df.request_seen(warm[0])  # type: ignore[arg-type]
        df.bloom.add_many(warm)
        for phase in ("new", "duplicate"):
            start = relay.turns
            flags = [df.request_seen(fp) for fp in fps]  # type: ignore[arg-type]
            assert all(flags) == (phase == "duplicate"), (phase, flags)
            rows.append(
                _row(
                    OURS,
                    f"round trips per {phase} fingerprint",
                    (relay.turns - start) / count,
                    "round trips",
                    "request_seen",
                )
            )
        start = relay.turns
        df.bloom.add_many(_fps(1000, seed=6))
        rows.append(
            _row(OURS, "round trips per add_many(1000)", relay.turns - start, "round trips", "")
        )
        for scenario, kind in ((BOOK, "bloomfilter"), (SET, "set")):
            key = f"{kind}:key"
            common = {
                "url": relay.url,
                "kind": kind,
                "key": key,
                "bit": 24,
                "hashes": 6,
                "mode": "seen",
            }
            start = relay.turns
            peer(**common, count=0, seed=7)
            setup = relay.turns - start
            for phase in ("new", "duplicate"):
                start = relay.turns
                peer(**common, count=count, seed=7)
                rows.append(
                    _row(
                        scenario,
                        f"round trips per {phase} fingerprint",
                        (relay.turns - start - setup) / count,
                        "round trips",
                        "request_seen",
                    )
                )
    finally:
        relay.close()


def _used_memory(admin: redis.Redis) -> int:
    """``used_memory`` once client buffers from a fill are released (clientsCron, every 100 ms)."""
    time.sleep(1.0)
    return int(admin.info("memory")["used_memory"])


def bench_memory(ctx: Any, peer: Peer, rows: list[dict[str, Any]]) -> None:
    n = 100_000 if ctx.quick else 1_000_000
    measured: dict[str, float] = {}
    in_keys: dict[str, float] = {}

    def measure(scenario: str, fill: Any) -> float:
        """Bytes per fingerprint: used_memory after ``fill(url)`` on an empty server."""
        server = _fresh_redis(ctx)
        admin = server.client()
        base = _used_memory(admin)
        fill(server.url)
        measured[scenario] = (_used_memory(admin) - base) / n
        # The keys alone, without the server's fixed costs (cached scripts, Lua heap).
        keys = list(admin.scan_iter(count=1000))
        in_keys[scenario] = sum(int(admin.memory_usage(key) or 0) for key in keys) / n
        return measured[scenario]

    def fill_ours(url: str) -> None:
        df = _ours(url, "ours:bloomfilter", capacity=n, error_rate=0.001)
        for start in range(0, n, 20_000):
            df.bloom.add_many(_fps(20_000, seed=start + 10))
        df.client.close()

    def fill_set(url: str) -> None:
        client = redis.Redis.from_url(url)
        for start in range(0, n, 20_000):
            # What scrapy-redis stores (hex), many per SADD: the same set, filled faster.
            client.sadd("set:dupefilter", *[fp.hex() for fp in _fps(20_000, seed=start + 10)])
        client.close()

    sample = 10_000

    def fill_book(url: str) -> None:
        # Its bitmap is allocated up to the highest bit set, i.e. whole after a few fingerprints.
        peer(
            url=url,
            kind="bloomfilter",
            key="book:bloomfilter",
            count=sample,
            seed=8,
            bit=30,
            hashes=6,
            mode="fill",
        )

    metric = f"memory per fingerprint at {n:,}"
    rows.append(
        _row(
            OURS,
            metric,
            measure(OURS, fill_ours),
            "bytes",
            "capacity = N, error rate 0.001; INFO memory used_memory",
        )
    )
    rows.append(
        _row(
            SET,
            metric,
            measure(SET, fill_set),
            "bytes",
            "40-character hex fingerprints in one set; INFO memory used_memory",
        )
    )
    rows.append(
        _row(
            OURS, "memory vs the set", measured[OURS] / measured[SET], "x", "target <= 1/30 = 0.033"
        )
    )
    for scenario in (OURS, SET):
        rows.append(
            _row(
                scenario,
                f"{metric}, keys only",
                in_keys[scenario],
                "bytes",
                "MEMORY USAGE of its keys",
            )
        )
    book = measure(BOOK, fill_book)
    rows.append(
        _row(
            BOOK,
            metric,
            book,
            "bytes",
            f"defaults (bit 30, k 6): its 128 MiB string, allocated whole after "
            f"{sample:,} fingerprints, does not grow with N",
        )
    )


def bench_false_positives(ctx: Any, peer: Peer, rows: list[dict[str, Any]]) -> None:
    bit, k = (16, 6) if ctx.quick else (20, 6)
    m = 1 << bit
    # The load at which (1 - e^(-kn/m))^k = 1 %.
    n = math.floor(-m / k * math.log(1 - 0.01 ** (1 / k)))
    probes = 20_000 if ctx.quick else 100_000
    theory = expected_error_rate(m, k, n)
    note = f"m = 2^{bit}, k = {k}, n = {n:,}; {probes:,} fresh probes; theory {theory:.4f}"
    server = _fresh_redis(ctx)

    df = _ours(server.url, "ours:bloomfilter", capacity=n, bit=bit, hash_number=k)
    members = _fps(n, seed=20)
    for start in range(0, n, 20_000):
        df.bloom.add_many(members[start : start + 20_000])
    present = sum(df.bloom.contains_many(_fps(probes, seed=21)))
    rows.append(_row(OURS, "false-positive rate", present / probes, "", note))
    rows.append(_row(OURS, "false-positive rate / theory", present / probes / theory, "x", note))

    common = {
        "url": server.url,
        "kind": "bloomfilter",
        "key": "book:bloomfilter",
        "bit": bit,
        "hashes": k,
    }
    peer(**common, count=n, seed=20, mode="fill")
    book = peer(**common, count=probes, seed=21, mode="probe")
    rows.append(_row(BOOK, "false-positive rate", book["present"] / probes, "", note))
    rows.append(
        _row(BOOK, "false-positive rate / theory", book["present"] / probes / theory, "x", note)
    )


def run(ctx: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    peer = Peer(ctx)
    try:
        for bench in (bench_speed, bench_round_trips, bench_memory, bench_false_positives):
            bench(ctx, peer, rows)
    finally:
        peer.close()
        for server in _servers:
            _empty(server)
        _servers.clear()
    return rows
