"""The request guard's rules in-process: which Host names pass where, and strict JSON.

The services' tests run on loopback; the rules for a service reached on a private address
(the lab's hub) are checked here with httpx's ASGI transport, which reports the URL's host
as the address the request arrived on.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from crawlfleet.service.http import BadJson, GuardPolicy, install_guard, parse_json


async def echo(request: Request) -> Response:
    return PlainTextResponse(f"{len(await request.body())} bytes")


def guarded_app(*, key_required: bool, key_header: str | None = "x-api-key") -> Starlette:
    app = Starlette(routes=[Route("/", echo, methods=["GET", "POST"])])
    install_guard(
        app,
        GuardPolicy(
            error=lambda status, message: PlainTextResponse(message, status),
            max_body=100,
            key_header=key_header,
            api_key_required=key_required,
        ),
    )
    return app


def status_of(app: Starlette, base: str, method: str = "GET", **kwargs: object) -> int:
    async def call() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base) as client:
            response = await client.request(method, "/", **kwargs)  # type: ignore[arg-type]
            assert "\n" not in response.text
            return response.status_code

    return asyncio.run(call())


@pytest.mark.parametrize(
    ("bound", "key_required", "host", "status"),
    [
        ("10.0.0.5", True, "hub.example", 200),  # the lab: private address, key required
        ("10.0.0.5", True, "10.0.0.5:5555", 200),
        ("10.0.0.5", False, "10.0.0.5:8000", 200),  # the demo site on its private address
        ("10.0.0.5", False, "localhost:8000", 200),  # an SSH tunnel or port forward
        ("10.0.0.5", False, "hub.example", 421),
        ("127.0.0.1", True, "evil.example", 421),  # loopback: a key does not widen the names
        ("127.0.0.1", False, "[::1]:5555", 200),
        ("127.0.0.1", False, "LOCALHOST.:5555", 200),
        ("127.0.0.1", False, "127.0.0.2", 421),
    ],
)
def test_host_rule(bound: str, key_required: bool, host: str, status: int) -> None:
    app = guarded_app(key_required=key_required)
    assert status_of(app, f"http://{bound}:5555", headers={"Host": host}) == status


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "application/json"}, 200),
        ({"Content-Type": "text/plain"}, 403),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 403),
        ({}, 403),  # a body without a Content-Type
        ({"Content-Type": "text/plain", "X-API-Key": "k"}, 200),
        ({"Content-Type": "application/json", "Origin": "http://127.0.0.1:5555"}, 200),
        ({"Content-Type": "application/json", "Origin": "http://127.0.0.1:5556"}, 403),
        ({"Content-Type": "application/json", "Sec-Fetch-Site": "none"}, 200),
        ({"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, 403),
    ],
)
def test_write_rule(headers: dict[str, str], status: int) -> None:
    app = guarded_app(key_required=False)
    assert status_of(app, "http://127.0.0.1:5555", "POST", headers=headers, content=b"{}") == status


def test_form_rule_needs_a_key_header() -> None:
    app = guarded_app(key_required=False, key_header=None)  # the demo site: curl -d works
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    assert status_of(app, "http://127.0.0.1:8000", "POST", headers=headers, content=b"{}") == 200


def test_body_limit_in_process() -> None:
    app = guarded_app(key_required=False)
    json_type = {"Content-Type": "application/json"}
    assert status_of(app, "http://127.0.0.1", "POST", headers=json_type, content=b"x" * 100) == 200
    assert status_of(app, "http://127.0.0.1", "POST", headers=json_type, content=b"x" * 101) == 413

    def chunks() -> object:
        async def gen():  # type: ignore[no-untyped-def]
            for _ in range(10):
                yield b"x" * 50

        return gen()

    assert status_of(app, "http://127.0.0.1", "POST", headers=json_type, content=chunks()) == 413


@pytest.mark.parametrize(
    "raw", [b"[" * 100_000, b"\xff", b"{", b"NaN", b"1" * 5000, b'{"a": -Infinity}', b""]
)
def test_parse_json_raises_one_line_bad_json(raw: bytes) -> None:
    with pytest.raises(BadJson) as caught:
        parse_json(raw)
    assert "\n" not in str(caught.value)


def test_parse_json_reads_json() -> None:
    assert parse_json(json.dumps({"a": [1, 2.5, None]}).encode()) == {"a": [1, 2.5, None]}
