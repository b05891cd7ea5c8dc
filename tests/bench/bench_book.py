"""Book crawl benchmark: pages/s of `scrapy crawl book` workers through three forward proxies and
both pools, against the demo site, with the frontier scheduler and the Bloom filter; and the demo
site's own capacity (so that it is known not to be the bottleneck).

Uses the integration tests' lab (tests/integration/book/book_lab.py): a real demo site, three
forward proxies leaving from 127.0.0.2/.3/.4, the real proxy and account pools, a fresh
redis-server. The crawl time is from the first worker's open to the last worker's close, less
the 2 s the frontier waits (``SCHEDULER_IDLE_BEFORE_CLOSE``) before closing an idle crawl;
process start-up is reported separately as wall time. Pool calls per 1,000 pages show that the
middlewares fetch proxies in batches and cache tokens instead of asking per request.

The demo site's capacity: authenticated detail pages requested by a raw asyncio HTTP/1.1 client
over 50 keep-alive connections (one request in flight on each), for a fixed time.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import redis
from book_lab import ACCOUNTS, CRAWL_SETTINGS, Lab, wait_workers

from crawlfleet.demosite.catalogue import Catalogue

ROOT = Path(__file__).resolve().parents[2]

CONNECTIONS = 50


async def _site_load(port: int, token: str, ids: list[str], seconds: float) -> int:
    """Requests answered 200 within ``seconds`` by CONNECTIONS keep-alive connections."""
    deadline = time.monotonic() + seconds
    done = 0

    async def connection() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.monotonic() < deadline:
            request = (
                f"GET /api/book/{random.choice(ids)}/ HTTP/1.1\r\nHost: bench\r\n"
                f"Authorization: jwt {token}\r\n\r\n"
            )
            writer.write(request.encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            if head.startswith(b"HTTP/1.1 200"):
                done += 1
        writer.close()

    await asyncio.gather(*(connection() for _ in range(CONNECTIONS)))
    return done


def site_capacity(ctx: Any, workers: int) -> dict[str, Any]:
    import httpx

    workdir = ctx.workdir / f"book-site-{workers}"
    workdir.mkdir(parents=True, exist_ok=True)
    lab = Lab(workdir, "redis://unused")
    seconds = 3.0 if ctx.quick else 8.0
    try:
        site = lab.start_demosite("--workers", str(workers), books=9216)
        user, password = next(iter(ACCOUNTS.items()))
        token = httpx.post(
            f"{site}/api/login", json={"username": user, "password": password}, trust_env=False
        ).json()["token"]
        port = int(site.rsplit(":", 1)[1])
        ids = Catalogue(9216, seed=7).ids
        answered = asyncio.run(_site_load(port, token, ids, seconds))
    finally:
        lab.close()
    return {
        "section": "book crawl",
        "scenario": f"demo site alone, {workers} uvicorn worker(s)",
        "metric": "detail pages/s",
        "value": answered / seconds,
        "unit": "requests/s",
        "note": f"{CONNECTIONS} keep-alive connections, {seconds:.0f} s, JWT checked per request",
    }


def crawl(lab: Lab, workers: int, books: int) -> dict[str, float]:
    client = redis.Redis.from_url(lab.redis_url)
    keys = list(client.scan_iter("book:*"))
    if keys:
        client.delete(*keys)
    started = time.monotonic()
    procs = [
        lab.start_worker(f"bench-{workers}w-{i}", lab.worker_env, *CRAWL_SETTINGS)
        for i in range(workers)
    ]
    stats = wait_workers(procs, timeout=600)
    wall = time.monotonic() - started
    items = client.xlen("book:items")
    client.close()
    if items < books:
        raise RuntimeError(f"only {items} of {books} books stored")
    opened = min(datetime.fromisoformat(str(s["start_time"])) for s in stats)
    closed = max(datetime.fromisoformat(str(s["finish_time"])) for s in stats)
    seconds = (closed - opened).total_seconds() - 2

    def total(name: str) -> int:
        return sum(int(str(s.get(name, 0))) for s in stats)

    pages = total("response_received_count")
    calls = total("proxy/pool/requests") + total("auth/pool/requests")
    return {"pages": pages, "seconds": seconds, "wall": wall, "calls": calls}


def run(ctx: Any) -> list[dict[str, Any]]:
    books = 300 if ctx.quick else 1000
    scenarios = (2,) if ctx.quick else (1, 2)
    server = ctx.start_redis()
    workdir = ctx.workdir / "book"
    workdir.mkdir(parents=True, exist_ok=True)
    lab = Lab(workdir, server.url)
    rows: list[dict[str, Any]] = []
    try:
        lab.start_demosite(books=books)
        lab.start_proxies()
        lab.crawl_env(lab.start_proxypool(), lab.start_accountpool("--no-tester"))
        for workers in scenarios:
            result = crawl(lab, workers, books)
            scenario = f"{books} books, {workers} worker(s), 3 proxies + pools"
            note = (
                f"{result['pages']:.0f} pages in {result['seconds']:.1f} s "
                f"(wall {result['wall']:.1f} s with start-up)"
            )
            rows += [
                {
                    "section": "book crawl",
                    "scenario": scenario,
                    "metric": "pages/s",
                    "value": result["pages"] / result["seconds"],
                    "unit": "pages/s",
                    "note": note,
                },
                {
                    "section": "book crawl",
                    "scenario": scenario,
                    "metric": "pool calls per 1,000 pages",
                    "value": 1000 * result["calls"] / result["pages"],
                    "unit": "calls",
                    "note": "proxy batches + token fetches, all workers",
                },
            ]
    finally:
        lab.close()
    rows.append(site_capacity(ctx, 1))
    if not ctx.quick:
        rows.append(site_capacity(ctx, 2))
    return rows
