"""Items on the hub: the Redis stream pipeline (batches, timer, Redis outage) and
`crawlfleet export` (de-duplication, JSON lines and CSV, clear errors) on a real redis-server."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.utils.test import get_crawler

from bookcrawler.items import BookItem
from bookcrawler.spiders.book import BookSpider
from crawlfleet.cli import main as cli
from crawlfleet.pipelines import RedisItemsPipeline


def make_pipeline(redis_url: str, **settings: Any) -> RedisItemsPipeline:
    crawler = get_crawler(BookSpider, {"REDIS_URL": redis_url, **settings})
    crawler.spider = BookSpider.from_crawler(crawler)
    return RedisItemsPipeline.from_crawler(crawler)


def book(n: int, **fields: Any) -> BookItem:
    return BookItem(id=str(1000000 + n), name=f"Book {n}", authors=["A", "B"], **fields)


def test_pipeline_writes_batches_and_returns_once_items_are_stored(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    pipeline = make_pipeline(redis_url, ITEMS_BATCH_SIZE=3, ITEMS_FLUSH_INTERVAL=0.3)

    async def crawl() -> None:
        await pipeline.open_spider()
        items = [asyncio.ensure_future(pipeline.process_item(book(n))) for n in range(7)]
        await asyncio.sleep(0.05)
        assert client.xlen("book:items") == 6  # two full batches went at once
        assert [t.done() for t in items] == [True] * 6 + [False]  # the 7th waits for Redis
        await asyncio.wait_for(items[6], 1)  # the timer flushed it
        assert client.xlen("book:items") == 7
        assert await items[0] == book(0)
        last = asyncio.ensure_future(pipeline.process_item(book(7)))
        await pipeline.close_spider()
        await last

    asyncio.run(crawl())
    entries = client.xrange("book:items")
    assert [e[1][b"id"].decode() for e in entries] == [str(1000000 + n) for n in range(8)]
    assert json.loads(entries[0][1][b"item"]) == dict(book(0))
    assert pipeline.stats.get_value("items/redis/written") == 8


def test_pipeline_holds_items_until_redis_is_back(own_redis: Any) -> None:
    pipeline = make_pipeline(own_redis.url, ITEMS_BATCH_SIZE=2)

    async def crawl() -> None:
        await pipeline.open_spider()
        own_redis.stop()
        items = [asyncio.ensure_future(pipeline.process_item(book(n))) for n in range(5)]
        await asyncio.sleep(0.5)
        assert not any(t.done() for t in items)  # not acknowledged: nothing can be lost
        assert len(pipeline.buffer) == 5
        assert pipeline.stats.get_value("items/redis/error") >= 1
        own_redis.start()
        await asyncio.wait_for(asyncio.gather(*items), 10)
        await pipeline.close_spider()

    asyncio.run(crawl())
    client = redis.Redis.from_url(own_redis.url)
    ids = [e[1][b"id"] for e in client.xrange("book:items")]
    assert sorted(ids) == sorted(str(1000000 + n).encode() for n in range(5))


def fill(client: redis.Redis, items: list[dict[str, Any]], key: str = "book:items") -> None:
    for item in items:
        client.xadd(key, {"id": str(item.get("id", "")), "item": json.dumps(item)})


def test_export_jsonl_deduplicates_by_id(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: Any
) -> None:
    items = [dict(book(n)) for n in range(2500)]
    fill(redis_client, items + items[:10])  # at-least-once: ten books stored twice
    out = tmp_path / "books.jsonl"
    assert cli(["export", "book", "-o", str(out), "--redis-url", redis_url, "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"wrote 2500 items to {out} (10 duplicates skipped, 2510 read)"
    )
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert exported == items


def test_export_csv_encodes_lists_as_json(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, monkeypatch: Any
) -> None:
    fill(redis_client, [dict(book(1, tags=["x", "y"])), dict(book(2, tags=["z"]))])
    monkeypatch.setenv("REDIS_URL", redis_url)  # the default of --redis-url
    out = tmp_path / "books.csv"
    assert cli(["export", "book", "-o", str(out), "--quiet"]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["id"] for r in rows] == ["1000001", "1000002"]
    assert json.loads(rows[0]["tags"]) == ["x", "y"]
    assert json.loads(rows[0]["authors"]) == ["A", "B"]


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        ("none", ["-o", "books.txt"], "cannot tell the format of"),
        ("none", ["-o", "books.jsonl"], "no items: stream book:items"),
        ("string", ["-o", "books.jsonl"], "book:items at redis://127.0.0.1"),
        ("bad-entry", ["-o", "books.jsonl"], "is not a JSON item"),
        ("none", ["-o", "books.jsonl", "--redis-url", "http://x"], "REDIS_URL must look like"),
    ],
)
def test_export_errors_are_one_line_and_leave_no_file(
    setup: str,
    argv: list[str],
    message: str,
    redis_url: str,
    redis_client: redis.Redis,
    tmp_path: Path,
    capsys: Any,
    monkeypatch: Any,
) -> None:
    monkeypatch.chdir(tmp_path)
    if setup == "string":
        redis_client.set("book:items", "not a stream")
    elif setup == "bad-entry":
        fill(redis_client, [dict(book(1))])
        redis_client.xadd("book:items", {"id": "2", "item": "{broken"})
    args = ["export", "book", *argv]
    if "--redis-url" not in argv:
        args += ["--redis-url", redis_url]
    assert cli(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("crawlfleet export: error: ") and message in err
    assert "\n" not in err
    assert list(tmp_path.iterdir()) == []  # no partial output file
