"""Fuzz suite of the frontier's decoders (issue 21): any bytes in, a Request or a one-line
DecodeError/StartEntryError out — never another exception, never a hang. ``crawlfleet seed``
accepts only entries a worker then crawls (the same validator)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from scrapy import Request, Spider

from crawlfleet.frontier.serialization import DecodeError, RequestCodec
from crawlfleet.frontier.startfeed import StartEntryError, request_from_entry
from crawlfleet.jobs.seeding import check_entry

pytestmark = pytest.mark.fuzz

# Generous: these machines are shared; a hang or a quadratic blow-up is far above it.
TIME_LIMIT = 2.0
T = TypeVar("T")
FIELDS = [
    "url",
    "method",
    "headers",
    "body",
    "cookies",
    "meta",
    "encoding",
    "priority",
    "dont_filter",
    "flags",
    "cb_kwargs",
    "callback",
    "errback",
    "_class",
    "dumps_kwargs",
]
NAMES = [
    "parse",
    "parse_item",
    "__init__",
    "_private",
    "start",
    "close",
    "nosuch",
    "utf-8",
    "latin-1",
    "POST",
    "scrapy.FormRequest",
    "scrapy.http.request.form.FormRequest",
    "this.s",
    "os.system",
]
URLS = [
    "http://127.0.0.1:8000/a",
    "https://h/b?c=1",
    "file:///etc/hostname",
    "ftp://h/x",
    "data:text/plain,hi",
    "http:///nohost",
    "http://h:99999/",
    "",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(NAMES)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)
urls = st.sampled_from(URLS) | st.text(max_size=40)
short = st.text(max_size=8)
# Anything in any field, and entries close to what Scrapy writes (so many are accepted).
entries = st.fixed_dictionaries(
    {"url": urls},
    optional={name: json_values for name in FIELDS if name != "url"},
) | st.fixed_dictionaries(
    {"url": st.sampled_from(URLS[:2]) | urls},
    optional={
        "method": st.sampled_from(["GET", "POST", "G T", ""]),
        "headers": st.dictionaries(short, short | st.lists(short, max_size=2), max_size=3),
        "body": st.text(max_size=20),
        "cookies": st.dictionaries(short, short, max_size=2),
        "meta": st.dictionaries(short, json_values, max_size=4),
        "encoding": st.sampled_from(NAMES),
        "priority": st.integers(),
        "dont_filter": st.booleans(),
        "flags": st.lists(short, max_size=2),
        "cb_kwargs": st.dictionaries(short, json_values, max_size=2),
        "callback": st.sampled_from(NAMES),
        "errback": st.sampled_from(NAMES),
        "_class": st.sampled_from(NAMES),
    },
)


class FuzzSpider(Spider):
    name = "fuzz"

    def parse_item(self, response: object) -> None:
        pass


SPIDER = FuzzSpider()
CODECS = [RequestCodec(SPIDER, "msgpack"), RequestCodec(SPIDER, "json")]


def one_line_or_none(read: Callable[[], T], error: type[Exception]) -> T | None:
    """What ``read()`` returns, or None when it raised ``error`` with one non-empty line; never
    hanging on a crafted input (seconds, where a quadratic parse would take minutes)."""
    started = time.monotonic()
    try:
        value: T | None = read()
    except error as exc:
        assert "\n" not in str(exc) and str(exc)
        value = None
    assert time.monotonic() - started < TIME_LIMIT
    return value


def decode_or_error(payload: bytes) -> Request | None:
    return one_line_or_none(lambda: CODECS[0].decode(payload), DecodeError)


def start_or_error(raw: bytes) -> Request | None:
    return one_line_or_none(lambda: request_from_entry(raw, SPIDER), StartEntryError)


@given(st.binary(max_size=2000))
@example(b'{"url":"http://h/","encoding":"nosuch"}')
@example(b'{"url":"http://h/","meta":' + b"[" * 3000 + b"]" * 3000 + b"}")
@example(b"\x91" * 5000)
@example(b"\xdd\xff\xff\xff\xff")
def test_any_bytes_decode_to_a_request_or_a_decode_error(payload: bytes) -> None:
    decode_or_error(payload)


@given(entries, st.booleans())
def test_any_entry_object_decodes_to_a_request_or_a_decode_error(
    data: dict[str, Any], as_json: bool
) -> None:
    if as_json:
        payload = json.dumps(data).encode()  # NaN and Infinity included
    else:
        try:
            payload = msgpack.packb(data, use_bin_type=True)
        except (OverflowError, ValueError, TypeError):
            assume(False)
    request = decode_or_error(payload)
    if request is not None:
        # what a worker accepted it can store again, and read back the same
        for codec in CODECS:
            back = codec.decode(codec.encode(request))
            assert back.url == request.url and back.method == request.method


@given(st.binary(max_size=400).filter(lambda b: len(b) > 16))
def test_a_mutated_valid_payload_decodes_or_fails_cleanly(noise: bytes) -> None:
    valid = CODECS[0].encode(
        Request("https://h/x", method="POST", body=b"\x00", meta={"a": [1, {"b": 2}]})
    )
    cut = noise[0] % len(valid)
    decode_or_error(valid[:cut] + noise[1:] + valid[cut:])


@given(st.binary(max_size=1000) | st.text(max_size=300).map(str.encode))
@example(b'{"url":"http://h/","meta":{"x":' + b"[" * 3000 + b"]" * 3000 + b"}}")
def test_any_start_entry_becomes_a_request_or_one_error(raw: bytes) -> None:
    start_or_error(raw)


@given(entries)
def test_any_start_entry_object_becomes_a_request_or_one_error(data: dict[str, Any]) -> None:
    start_or_error(json.dumps(data).encode())


def _seed_checked(text: str) -> str | None:
    return one_line_or_none(lambda: check_entry(text), ValueError)


@given(st.text(max_size=300))
@example('{"url": "http://h/", "priority": 1e400}')
@example('{"url": "http://h/", "meta": {"n": 18446744073709551617}}')
def test_seed_validator_takes_any_line(text: str) -> None:
    _seed_checked(text.strip())


@given(
    st.fixed_dictionaries(
        {"url": st.sampled_from(URLS[:2]) | urls},
        optional={
            name: json_values
            for name in ("meta", "method", "body", "headers", "priority", "dont_filter")
        }
        | {
            "callback": st.sampled_from(["parse", "parse_item", "_private", "start"]),
            "meta": st.dictionaries(short, json_values, max_size=4),
            "headers": st.dictionaries(short, short | st.lists(short, max_size=2), max_size=3),
        },
    )
)
def test_what_seed_accepts_a_worker_crawls(data: dict[str, Any]) -> None:
    stored = _seed_checked(json.dumps(data, allow_nan=True))
    if stored is None:
        return
    request = request_from_entry(stored.encode(), SPIDER)  # no StartEntryError
    for codec in CODECS:  # and the worker can queue it: no dead letter at enqueue either
        assert codec.decode(codec.encode(request)).url == request.url
