"""The HTTP API on a real Redis, served by uvicorn in a background thread, called over loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import httpx
import pytest
import redis
from proxypool_helpers import serve_app_in_thread

from crawlfleet.proxypool.config import Settings

if TYPE_CHECKING:
    from redis_server import RedisServer

KEY = "pp:api"
API_KEY = "s3cret-key"
GOOD = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def api_url(redis_server: RedisServer) -> Iterator[str]:
    settings = replace(
        Settings(),
        redis_url=redis_server.url,
        redis_key=KEY,
        api_key=API_KEY,
        max_count=50,
        report_step=30,
    )
    with serve_app_in_thread(settings) as base_url:
        yield base_url


@pytest.fixture
def api(api_url: str, redis_url: str) -> Iterator[httpx.Client]:
    """A client of the module's server; ``redis_url`` empties the database for each test."""
    with httpx.Client(base_url=api_url) as client:
        yield client


def metric(text: str, name: str) -> float:
    for line in text.split("\n"):
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def filled(redis_client: redis.Redis) -> dict[str, float]:
    pool = {
        "http://10.0.0.1:8080": 100.0,
        "http://10.0.0.2:8080": 100.0,
        "http://u:pw@10.0.0.3:3128": 100.0,
        "https://10.0.0.4:443": 100.0,
        "http://10.0.0.5:8080": 40.0,
    }
    redis_client.zadd(KEY, pool)
    return pool


def test_random_returns_host_port_as_text(api: httpx.Client, redis_client: redis.Redis) -> None:
    redis_client.zadd(KEY, {"http://10.0.0.1:8080": 100, "http://10.0.0.9:1": 10})
    response = api.get("/random", headers=GOOD)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "10.0.0.1:8080"
    assert api.get("/random?format=url", headers=GOOD).text == "http://10.0.0.1:8080"


def test_random_count_gives_distinct_best_proxies(
    api: httpx.Client, filled: dict[str, float]
) -> None:
    response = api.get("/random?count=4", headers=GOOD)
    assert response.status_code == 200
    assert sorted(response.text.split("\n")) == sorted(
        ["10.0.0.1:8080", "10.0.0.2:8080", "http://u:pw@10.0.0.3:3128", "https://10.0.0.4:443"]
    )
    assert len(api.get("/random?count=50", headers=GOOD).text.split("\n")) == 5


@pytest.mark.parametrize("count", ["0", "-1", "abc", "1000000", "", "1.5", "51"])
def test_bad_count_is_400(api: httpx.Client, filled: dict[str, float], count: str) -> None:
    response = api.get(f"/random?count={count}", headers=GOOD)
    assert response.status_code == 400
    assert response.text == "count must be an integer between 1 and 50"


def test_bad_format_is_400(api: httpx.Client, filled: dict[str, float]) -> None:
    assert api.get("/random?format=xml", headers=GOOD).status_code == 400
    response = api.get("/all?format=xml", headers=GOOD)
    assert (response.status_code, response.text) == (400, "format must be one of auto, url, json")


@pytest.mark.parametrize("path", ["/random", "/all", "/count"])
def test_api_key_good_wrong_and_missing(
    api: httpx.Client, filled: dict[str, float], path: str
) -> None:
    assert api.get(path, headers=GOOD).status_code == 200
    wrong = api.get(path, headers={"X-API-Key": "nope"})
    assert (wrong.status_code, wrong.text) == (401, "invalid API key")
    missing = api.get(path)
    assert (missing.status_code, missing.text) == (401, "missing X-API-Key header")
    assert api.get(path, headers={"X-API-Key": API_KEY + "x"}).status_code == 401


def test_report_needs_the_key_and_health_metrics_do_not(
    api: httpx.Client, filled: dict[str, float], redis_client: redis.Redis
) -> None:
    assert api.post("/report", json={"proxy": "10.0.0.1:8080"}).status_code == 401
    assert redis_client.zscore(KEY, "http://10.0.0.1:8080") == 100.0
    assert api.get("/health").status_code == 200
    assert api.get("/metrics").status_code == 200


def test_all_and_count(api: httpx.Client, filled: dict[str, float]) -> None:
    lines = api.get("/all", headers=GOOD).text.split("\n")
    assert len(lines) == 5 and lines[-1] == "10.0.0.5:8080"  # best first
    data = api.get("/all?format=json", headers=GOOD).json()
    assert {d["proxy"]: d["score"] for d in data} == {k: int(v) for k, v in filled.items()}
    assert "http://10.0.0.1:8080" in api.get("/all?format=url", headers=GOOD).text.split("\n")
    count = api.get("/count", headers=GOOD)
    assert (count.status_code, count.text) == (200, "5")


def test_empty_pool(api: httpx.Client) -> None:
    response = api.get("/random", headers=GOOD)
    assert response.status_code == 503
    assert response.text.startswith("proxy pool is empty")
    assert api.get("/random?count=3", headers=GOOD).status_code == 503
    assert api.get("/count", headers=GOOD).text == "0"
    assert api.get("/all", headers=GOOD).text == ""
    health = api.get("/health")
    assert (health.status_code, health.json()["pool_size"]) == (200, 0)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/nope", 404),
        ("GET", "/random/extra", 404),
        ("GET", "/", 404),
        ("POST", "/random", 405),
        ("DELETE", "/all", 405),
        ("PUT", "/count", 405),
        ("GET", "/report", 405),
        ("POST", "/health", 405),
        ("PATCH", "/metrics", 405),
    ],
)
def test_unknown_paths_and_methods(
    api: httpx.Client, filled: dict[str, float], method: str, path: str, status: int
) -> None:
    assert api.request(method, path, headers=GOOD).status_code == status


def test_report_decreases_at_once(
    api: httpx.Client, filled: dict[str, float], redis_client: redis.Redis
) -> None:
    response = api.post("/report", json={"proxy": "10.0.0.1:8080"}, headers=GOOD)
    assert response.status_code == 200
    assert response.json() == {
        "proxy": "10.0.0.1:8080",
        "reason": "failed",
        "score": 70,
        "removed": False,
    }
    form = api.post("/report", data={"proxy": "http://10.0.0.1:8080"}, headers=GOOD)
    assert form.json()["score"] == 40
    text = api.post("/report", content="10.0.0.1:8080", headers=GOOD)
    assert text.json()["score"] == 10
    last = api.post("/report", content="10.0.0.1:8080", headers=GOOD)
    assert last.json() == {
        "proxy": "10.0.0.1:8080",
        "reason": "failed",
        "score": 0,
        "removed": True,
    }
    assert redis_client.zscore(KEY, "http://10.0.0.1:8080") is None
    banned = api.post(
        "/report", json={"proxy": "http://u:pw@10.0.0.3:3128", "reason": "banned"}, headers=GOOD
    )
    assert banned.json()["removed"] is True
    assert redis_client.zcard(KEY) == 3


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        ({"json": {"proxy": "10.9.9.9:1"}}, 404, "proxy is not in the pool"),
        ({"json": {"proxy": "not a proxy"}}, 400, "bad proxy: whitespace inside"),
        ({"json": {"proxy": "10.0.0.1:8080", "reason": "bored"}}, 400, "reason must be one of"),
        ({"json": {}}, 400, "no proxy given"),
        ({"json": ["10.0.0.1:8080"]}, 400, "JSON body must be an object"),
        ({"content": "{", "headers": {"content-type": "application/json"}}, 400, "not valid JSON"),
        ({"content": b"\xff\xfe"}, 400, "not UTF-8"),
        ({"content": ""}, 400, "no proxy given"),
        ({"content": "x" * 5000}, 413, "larger than 4096 bytes"),
    ],
)
def test_report_bad_input(
    api: httpx.Client,
    filled: dict[str, float],
    redis_client: redis.Redis,
    kwargs: dict[str, object],
    status: int,
    error: str,
) -> None:
    headers = {**GOOD, **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    response = api.post("/report", headers=headers, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status
    assert error in response.json()["error"]
    assert {m.decode(): s for m, s in redis_client.zrange(KEY, 0, -1, withscores=True)} == filled


def test_health_and_metrics(
    api: httpx.Client, filled: dict[str, float], redis_client: redis.Redis
) -> None:
    health = api.get("/health").json()
    assert health["status"] == "ok" and health["redis"] == "ok"
    assert health["pool_size"] == 5 and health["proxies_at_100"] == 4
    redis_client.hset(f"{KEY}:stats", mapping={"tests_passed": 7, "tests_failed": 2})
    requests = [
        'proxypool_api_requests_total{endpoint="/random",status="200"}',
        'proxypool_api_requests_total{endpoint="/random",status="401"}',
        'proxypool_api_requests_total{endpoint="/random",status="400"}',
        'proxypool_api_requests_total{endpoint="other",status="404"}',
    ]
    before = api.get("/metrics").text
    api.get("/random", headers=GOOD)
    api.get("/random")
    api.get("/random?count=0", headers=GOOD)
    api.get("/elsewhere")
    text = api.get("/metrics").text
    assert [metric(text, name) - metric(before, name) for name in requests] == [1, 1, 1, 1]
    for line in [
        'proxypool_proxies{band="100"} 4.0',
        'proxypool_proxies{band="10-49"} 1.0',
        'proxypool_tests_total{result="passed"} 7.0',
        'proxypool_tests_total{result="failed"} 2.0',
        "proxypool_redis_up 1.0",
    ]:
        assert line in text.split("\n"), line
    assert API_KEY not in text and API_KEY not in json.dumps(health)
