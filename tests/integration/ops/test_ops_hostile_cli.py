"""Operator commands meeting hostile data on a real redis-server (issue 21, item 6): wrong-typed
keys for `purge --force`, formula cells in CSV `export`, `seed` flag order and what it refuses."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import redis
from ops_helpers import assert_one_line_error, cli


def test_purge_force_deletes_keys_of_unexpected_types(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("adv:workers", "x")  # a wrong-typed key: ZCOUNT would fail with WRONGTYPE
    client.hset("adv:requests", "a", "b")
    client.set("adv2:workers", "kept")
    refused = cli("purge", "adv", "--yes", "--redis-url", redis_url)
    assert_one_line_error(refused, 1, "adv:workers", "is a string", "--force")
    assert client.exists("adv:workers", "adv:requests") == 2
    done = cli("purge", "adv", "--yes", "--force", "--redis-url", redis_url)
    assert done.code == 0, done.err
    assert "removed 2 key(s) of adv" in done.out
    assert client.exists("adv:workers", "adv:requests") == 0
    assert client.get("adv2:workers") == b"kept"


def test_csv_export_defuses_formula_cells(redis_url: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_url)
    items = [
        {"id": "1", "name": '=HYPERLINK("http://evil.test/","click")', "price": -3},
        {"id": "2", "name": "+cmd|' /C calc'!A0", "price": 2.5},
        {"id": "3", "name": "@SUM(1+1)", "price": 0},
        {"id": "4", "name": "-2+3", "price": 1},
        {"id": "5", "name": "\tTAB", "price": 1},
        {"id": "6", "name": "plain = text", "price": 1},
    ]
    for item in items:
        client.xadd("adv:items", {"id": item["id"], "item": json.dumps(item)})
    out = tmp_path / "items.csv"
    done = cli("export", "adv", "-o", str(out), "--quiet", "--redis-url", redis_url)
    assert done.code == 0, done.err
    with out.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["name"] for r in rows] == [
        '\'=HYPERLINK("http://evil.test/","click")',
        "'+cmd|' /C calc'!A0",
        "'@SUM(1+1)",
        "'-2+3",
        "'\tTAB",
        "plain = text",
    ]
    assert rows[0]["price"] == "-3"  # numbers are not text: left as they are
    jsonl = tmp_path / "items.jsonl"
    assert cli("export", "adv", "-o", str(jsonl), "--quiet", "--redis-url", redis_url).code == 0
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == items  # unchanged


def test_seed_new_anywhere_and_nothing_a_worker_would_refuse(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    done = cli("seed", "adv", "--new", "http://h/a", "--redis-url", redis_url, "http://h/b")
    assert done.code == 0, done.err
    assert client.lrange("adv:start_urls", 0, -1) == [b"http://h/a", b"http://h/b"]
    for entry, needle in [
        ('{"url": "http://h/", "priority": 1e400}', "out of range"),
        ('{"url": "http://h/", "priority": 18446744073709551617}', "'priority'"),
        ('{"url": "http://h/", "colour": 1}', "unknown field"),
    ]:
        bad = cli("seed", "adv", "--new", entry, "http://h/c", "--redis-url", redis_url)
        assert_one_line_error(bad, 2, "argument 1", needle, "nothing was added")
    for name in ("", "adv*"):
        bad = cli("seed", name, "--new", "http://h/d", "--redis-url", redis_url)
        assert_one_line_error(bad, 2, "not a spider name")
    assert client.llen("adv:start_urls") == 2
    assert not list(client.scan_iter("adv[*]*")) and not client.exists(":start_urls")


def test_seed_takes_the_url_schemes_the_workers_take(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SCHEDULER_URL_SCHEMES", raising=False)
    client = redis.Redis.from_url(redis_url)
    ftp = "ftp://mirror.test/pub/a"
    refused = cli("seed", "adv", "--new", "http://h/a", ftp, "--redis-url", redis_url)
    assert_one_line_error(
        refused, 2, "argument 2", "not an http:// or https:// URL", "nothing was added"
    )
    assert not client.exists("adv:start_urls")
    done = cli("seed", "adv", "--new", "--schemes", "https,ftp", ftp, "--redis-url", redis_url)
    assert done.code == 0, done.err
    refused = cli(
        "seed", "adv", "--new", "--schemes", "https,ftp", "http://h/b", "--redis-url", redis_url
    )
    assert_one_line_error(refused, 2, "argument 1", "not an https:// or ftp:// URL")
    env = {"SCHEDULER_URL_SCHEMES": "http,https,ftp"}
    done = cli("seed", "adv", "--new", "http://h/c", ftp, "--redis-url", redis_url, env=env)
    assert done.code == 0, done.err
    assert client.lrange("adv:start_urls", 0, -1) == [ftp.encode(), b"http://h/c", ftp.encode()]
    for schemes, needle in [("", "got ''"), ("HTTP", "got 'HTTP'"), ("http,", "got ''")]:
        bad = cli(
            "seed", "adv", "--new", "--schemes", schemes, "http://h/d", "--redis-url", redis_url
        )
        assert_one_line_error(bad, 2, "--schemes: SCHEDULER_URL_SCHEMES must list", needle)
    bad = cli(
        "seed",
        "adv",
        "--new",
        "http://h/d",
        "--redis-url",
        redis_url,
        env={"SCHEDULER_URL_SCHEMES": "a b"},
    )
    assert_one_line_error(bad, 2, "--schemes", "got 'a b'")
    assert client.llen("adv:start_urls") == 3


@pytest.mark.parametrize(
    ("since", "waiting_for"),
    [("inf", None), ("nan", None), ("abc", None), ("", None), ("-1e400", None), ("0", "age")],
)
def test_a_hostile_waiting_record_is_shown_without_a_crash(
    redis_url: str, since: str, waiting_for: str | None
) -> None:
    client = redis.Redis.from_url(redis_url)
    seconds, _ = client.time()
    client.hset("adv:frontier", "queue_key", "adv:requests")
    client.zadd("adv:workers", {"w1": (int(seconds) + 60) * 1000})  # alive for a minute
    client.hset(
        "adv:worker:w1",
        mapping={
            "info": "{}",
            "heartbeat": int(seconds) * 1000,
            "waiting": "[red]replicas[/]: \x1b[31m\u202e" + "x" * 300,
            "waiting_since": since,
        },
    )
    shown = cli("status", "adv", "--json", "--redis-url", redis_url)
    assert shown.code == 0, shown.err
    (row,) = json.loads(shown.out)["spiders"][0]["workers"]
    assert row["waiting"].startswith("[red]replicas[/]")
    if waiting_for is None:
        assert row["waiting_for"] is None
    else:
        assert row["waiting_for"] > 0
    text = cli("status", "adv", "--redis-url", redis_url)
    assert text.code == 0, text.err
    assert "waiting" in text.out and "\x1b[31m" not in text.out and "\u202e" not in text.out
    client.delete("adv:frontier", "adv:workers", "adv:worker:w1")
