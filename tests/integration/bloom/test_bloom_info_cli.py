"""`crawlfleet bloom-info SPIDER` against a real Redis."""

from __future__ import annotations

import json
import random

import pytest
import redis

from crawlfleet.cli import main
from crawlfleet.frontier.bloom import BloomFilter


def fill(client: redis.Redis, count: int, key: str = "book:bloomfilter", **kw: object) -> None:
    bf = BloomFilter(client, key, capacity=10_000, error_rate=0.01, **kw)  # type: ignore[arg-type]
    data = random.Random(count).randbytes(20 * count)
    bf.add_many([data[i : i + 20] for i in range(0, len(data), 20)])


def test_table_output(redis_url: str, redis_client: redis.Redis, capsys) -> None:
    fill(redis_client, 5_000)
    assert main(["bloom-info", "book", "--redis-url", redis_url]) == 0
    out, err = capsys.readouterr()
    assert "book:bloomfilter" in out
    assert "95,851 bits" in out
    assert "hashes (k)             7" in out
    assert "10,000 at error rate 0.01" in out
    assert err == ""


def test_table_output_of_a_scalable_filter(
    redis_url: str, redis_client: redis.Redis, capsys
) -> None:
    fill(redis_client, 5_000, scalable=True, initial_capacity=1000)
    assert main(["bloom-info", "book", "--redis-url", redis_url]) == 0
    out, err = capsys.readouterr()
    # layers of 1,000, 3,555 and 5,445 fingerprints at k = 8, 9, 10
    assert "book:bloomfilter (scalable: 3 of 3 layers)" in out
    assert "hashes (k)             10 (newest layer)" in out
    assert "10,000 at error rate 0.01" in out
    assert err == ""


def test_json_output_and_environment_url(
    redis_url: str, redis_client: redis.Redis, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(redis_client, 5_000, key="bf:book", blocks=2)
    monkeypatch.setenv("REDIS_URL", redis_url)
    assert main(["bloom-info", "book", "--key", "bf:%(spider)s", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["blocks"] == 2
    assert info["keys"] == ["{bf:book:0}", "{bf:book:1}"]
    assert info["count_estimate"] == pytest.approx(5_000, rel=0.05)
    assert set(info) >= {
        "size_bytes",
        "hashes",
        "capacity",
        "count_estimate",
        "fill_ratio",
        "estimated_error_rate",
    }


def test_warns_past_design_load(redis_url: str, redis_client: redis.Redis, capsys) -> None:
    fill(redis_client, 15_000)
    assert main(["bloom-info", "book", "--redis-url", redis_url]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: book:bloomfilter is past its design load (10,000")


def test_missing_filter_is_a_one_line_error(redis_url: str, capsys) -> None:
    assert main(["bloom-info", "nobody", "--redis-url", redis_url]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "crawlfleet bloom-info: error: no crawlfleet Bloom filter at key 'nobody:bloomfilter' "
        "(no nobody:bloomfilter:meta)"
    )


def test_bad_input(redis_url: str, redis_client: redis.Redis, capsys) -> None:
    assert main(["bloom-info", "book", "--redis-url", ""]) == 1
    assert "REDIS_URL" in capsys.readouterr().err
    assert main(["bloom-info", "book", "--redis-url", "redis://:pw@127.0.0.1:1/0"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in err
    assert "pw" not in err
    assert main(["bloom-info", "book", "--redis-url", redis_url, "--key", "%(x)s"]) == 1
    assert "--key" in capsys.readouterr().err
    redis_client.set("book:bloomfilter:meta", "x")
    assert main(["bloom-info", "book", "--redis-url", redis_url]) == 1
    assert "'book:bloomfilter:meta' is not Bloom filter metadata" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["bloom-info"])
    assert exit_info.value.code == 2


HOSTILE = ["", "bo*k", "book?", "[bk]ook", "a\\b", "bo ok", "a\x1b[31m", "x" * 201]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_spider_names_are_one_line_and_status_2(name: str, redis_url: str, capsys) -> None:
    # The check every operator command makes (opsargs.check_spider), before reading any key.
    assert main(["bloom-info", name, "--redis-url", redis_url]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("crawlfleet bloom-info: error: not a spider name: ")
    assert "\x1b" not in err and len(err) < 200
