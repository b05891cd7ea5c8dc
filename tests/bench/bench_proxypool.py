"""Proxy pool benchmark: ``GET /random`` against the anchor's selection, as the pool grows.

The anchor (Python3WebSpider/ProxyPool) answers ``/random`` with ``ZRANGEBYSCORE key 100 100``
(every max-score member) and ``random.choice`` in Python. Ours runs one Lua script that reads
the best score, counts its band and fetches one member by index: O(log N) instead of O(band).

Fairness: both selections are endpoints of the same Starlette app (ours is the real ``/random``;
the anchor's is a second route added by this module, on the same async Redis client), served
by one uvicorn process on loopback, loaded by the same client, on the same Redis, in the same
run. Every proxy has score 100 (a healthy, tested pool): the anchor's worst case, and ours too
since the whole pool is then the best band. At each size the two alternate for three rounds
and the medians are reported, which smooths out other load on a shared machine.

* requests/s, p50 and p99 latency: a raw asyncio HTTP/1.1 client with 50 keep-alive
  connections, one request in flight on each, a bounded number of requests per round (and a
  time budget, since the anchor gets slow). httpx's async client was tried first and cost about
  6 ms per request by itself on this machine, so it would have measured itself.
* Redis alone: the same two selections called directly from one asyncio client, one at a time:
  client time per pick (loopback round trip and reply parsing included), Redis's own time per
  pick (``INFO commandstats``; less sensitive to other load on the machine) and bytes sent per
  pick (``INFO stats``; exact).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

from support.net import free_port
from support.services import wait_healthy

from crawlfleet.proxypool.proxies import render_proxy
from crawlfleet.proxypool.store import MAX_SCORE, ProxyStore, connect

ROOT = Path(__file__).resolve().parents[2]

SECTION = "proxy pool /random"
KEY = "bench:proxies"
CONCURRENCY = 50
OURS = "crawlfleet (Lua: ZCOUNT band + ZREVRANGE by index)"
ANCHOR = "anchor (ZRANGEBYSCORE 100 100 + random.choice)"


def serve(port: int, redis_url: str) -> None:
    """Subprocess entry: our app plus the anchor's selection as ``/anchor-random``."""
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response

    from crawlfleet.proxypool.api import create_app
    from crawlfleet.proxypool.config import Settings

    async def main() -> None:
        settings = Settings(redis_url=redis_url, redis_key=KEY, max_size=10**6)
        client = connect(redis_url)
        app = create_app(settings, ProxyStore(client, KEY, settings.max_size))

        async def anchor_random(request: Request) -> Response:
            members = await client.zrangebyscore(KEY, MAX_SCORE, MAX_SCORE)
            if not members:
                return PlainTextResponse("empty", status_code=503)
            return PlainTextResponse(render_proxy(random.choice(members)))

        app.add_route("/anchor-random", anchor_random, methods=["GET"])
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=120,  # slow anchor rounds leave some connections idle a while
        )
        await uvicorn.Server(config).serve()

    asyncio.run(main())


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    """One keep-alive GET on an open connection; returns the status."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


async def load(base: str, path: str, total: int, budget: float) -> tuple[int, float, float, float]:
    """(requests done, requests/s, p50 ms, p99 ms): ``total`` GETs over CONCURRENCY keep-alive
    connections, or fewer if ``budget`` seconds run out first (the anchor gets slow)."""
    host, port = base.removeprefix("http://").split(":")
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    connections = [await asyncio.open_connection(host, int(port)) for _ in range(CONCURRENCY)]

    async def burst(count: int) -> list[float]:
        latencies: list[float] = []
        remaining = count
        deadline = time.perf_counter() + budget

        async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal remaining
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                started = time.perf_counter()
                status = await _get(reader, writer, request)
                latencies.append(time.perf_counter() - started)
                if status != 200:
                    raise RuntimeError(f"{path} answered {status}")

        await asyncio.gather(*(worker(r, w) for r, w in connections))
        return latencies

    try:
        started = time.perf_counter()
        latencies = await burst(total)
        elapsed = time.perf_counter() - started
    finally:
        for _, writer in connections:
            writer.close()
    cuts = statistics.quantiles(latencies, n=100)
    return len(latencies), len(latencies) / elapsed, cuts[49] * 1000, cuts[98] * 1000


class Direct(NamedTuple):  # not a dataclass: run.py loads this file outside sys.modules
    wall_us: float  # per pick, as the client sees it (loopback round trip included)
    redis_us: float  # per pick, Redis's own time for the command (INFO commandstats)
    reply_bytes: float  # per pick, bytes Redis sent (INFO stats total_net_output_bytes)


async def direct(redis_url: str, picks: int, budget: float) -> dict[str, Direct]:
    """Both selections called directly, one client, one at a time, each for ``picks`` picks or
    ``budget`` seconds. Nothing else talks to this Redis meanwhile, so its counters are ours."""
    client = connect(redis_url)
    store = ProxyStore(client, KEY, 10**6)

    async def ours() -> None:
        await store.random()

    async def anchor() -> None:
        random.choice(await client.zrangebyscore(KEY, MAX_SCORE, MAX_SCORE))

    async def measure(pick: Callable[[], Awaitable[None]], command: str) -> Direct:
        await pick()  # loads the script, opens the connection
        await client.config_resetstat()
        done, started = 0, time.perf_counter()
        while done < picks and time.perf_counter() - started < budget:
            await pick()
            done += 1
        wall = (time.perf_counter() - started) / done * 1e6
        calls = (await client.info("commandstats"))[f"cmdstat_{command}"]
        sent = (await client.info("stats"))["total_net_output_bytes"]
        return Direct(wall, calls["usec"] / done, sent / done)

    try:
        return {
            OURS: await measure(ours, "evalsha"),
            ANCHOR: await measure(anchor, "zrangebyscore"),
        }
    finally:
        await client.aclose()


def fill(redis_url: str, size: int) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.delete(KEY)
    addresses = [f"http://10.{i // 65536}.{i // 256 % 256}.{i % 256}:8080" for i in range(size)]
    for start in range(0, size, 1000):
        client.zadd(KEY, dict.fromkeys(addresses[start : start + 1000], MAX_SCORE))
    assert client.zcard(KEY) == size
    client.close()


def row(scenario: str, metric: str, value: float, unit: str, note: str) -> dict[str, Any]:
    return {
        "section": SECTION,
        "scenario": scenario,
        "metric": metric,
        "value": round(value, 2),
        "unit": unit,
        "note": note,
    }


def run(ctx: Any) -> list[dict[str, Any]]:
    sizes = (100, 1_000) if ctx.quick else (100, 1_000, 10_000)
    requests = 200 if ctx.quick else 1_500  # per round
    picks = 200 if ctx.quick else 2_000
    budget = 1.0 if ctx.quick else 5.0  # seconds per round at most (the anchor gets slow)
    rounds = 3  # alternating ours / anchor; medians smooth out other load on the machine
    server = ctx.start_redis()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port), server.url])
    rows: list[dict[str, Any]] = []
    try:
        wait_healthy(process, f"{base}/health", timeout=20, accept=lambda r: r.status_code == 200)
        fill(server.url, CONCURRENCY)
        # Once, before measuring: the server's Redis pool grows to one connection per request
        # in flight; both routes share it afterwards.
        asyncio.run(load(base, "/random", CONCURRENCY * 4, budget))
        for size in sizes:
            fill(server.url, size)
            results: dict[str, list[tuple[int, float, float, float]]] = {OURS: [], ANCHOR: []}
            for _ in range(rounds):
                for name, path in ((OURS, "/random"), (ANCHOR, "/anchor-random")):
                    results[name].append(asyncio.run(load(base, path, requests, budget)))
            for name, runs in results.items():
                done = sum(r[0] for r in runs)
                rps, p50, p99 = (statistics.median(r[i] for r in runs) for i in (1, 2, 3))
                scenario = f"{size:,} proxies, {name}"
                note = (
                    f"median of {rounds} rounds, {done} requests in all, {CONCURRENCY} in flight, "
                    "every proxy at score 100"
                )
                rows += [
                    row(scenario, "requests/s", rps, "req/s", note),
                    row(scenario, "p50 latency", p50, "ms", note),
                    row(scenario, "p99 latency", p99, "ms", note),
                ]
                print(f"   {scenario}: {rps:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
            note = "sequential picks from one client, no HTTP"
            for name, result in asyncio.run(direct(server.url, picks, budget)).items():
                scenario = f"{size:,} proxies, {name}"
                rows += [
                    row(scenario, "Redis alone: client time", result.wall_us, "us/pick", note),
                    row(
                        scenario,
                        "Redis alone: server time",
                        result.redis_us,
                        "us/pick",
                        "INFO commandstats usec / picks (script includes its inner commands)",
                    ),
                    row(
                        scenario,
                        "Redis alone: reply size",
                        result.reply_bytes,
                        "bytes/pick",
                        "INFO stats total_net_output_bytes / picks",
                    ),
                ]
                print(
                    f"   {scenario}, Redis alone: {result.wall_us:.0f} us client, "
                    f"{result.redis_us:.1f} us server, {result.reply_bytes:.0f} bytes"
                )
    finally:
        process.terminate()
        process.wait(timeout=15)
    return rows


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    serve(int(sys.argv[2]), sys.argv[3])
