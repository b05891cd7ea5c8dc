"""Start URLs fed through Redis, the scrapy-redis way: ``LPUSH <spider>:start_urls URL``.

An entry is either a URL or a JSON object ``{"url", "meta", "method", "body", "headers"}``
(optionally also ``"priority"``, ``"dont_filter"``, ``"callback"``). A spider that defines
``make_request_from_data(data: bytes)`` (as scrapy-redis's ``RedisSpider`` users do) builds the
request itself. The scheduler consumes the key in batches while the crawl runs.
"""

from __future__ import annotations

import json
from typing import Any

from scrapy import Request, Spider


class StartEntryError(ValueError):
    """A start_urls entry that cannot become a request; the message says why."""


def request_from_entry(raw: bytes, spider: Spider) -> Request:
    maker = getattr(spider, "make_request_from_data", None)
    if callable(maker):
        try:
            made = maker(raw)
        except Exception as exc:
            raise StartEntryError(f"make_request_from_data failed: {exc!r:.200}") from None
        if not isinstance(made, Request):
            raise StartEntryError("make_request_from_data did not return a Request")
        return made
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise StartEntryError("start URL entry is not UTF-8") from None
    if not text.startswith("{"):
        return _request(spider, {"url": text})
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StartEntryError(f"start URL entry is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise StartEntryError("start URL JSON entry must be an object")
    return _request(spider, data)


_FIELDS = {"url", "meta", "method", "body", "headers", "priority", "dont_filter", "callback"}


def _request(spider: Spider, data: dict[str, Any]) -> Request:
    unknown = set(data) - _FIELDS
    if unknown:
        raise StartEntryError(f"unknown field(s) in start URL entry: {', '.join(sorted(unknown))}")
    url = data.get("url")
    if not isinstance(url, str) or not url:
        raise StartEntryError("start URL entry has no 'url' string")
    kwargs: dict[str, Any] = {"url": url}
    for name, kind in (
        ("meta", dict),
        ("headers", dict),
        ("method", str),
        ("body", str),
        ("priority", int),
        ("dont_filter", bool),
    ):
        if name in data:
            if not isinstance(data[name], kind):
                raise StartEntryError(f"start URL entry field {name!r} must be a {kind.__name__}")
            kwargs[name] = data[name]
    callback = data.get("callback")
    if callback is not None:
        method = getattr(spider, str(callback), None)
        if not callable(method):
            raise StartEntryError(f"spider has no callback {callback!r}")
        kwargs["callback"] = method
    try:
        return Request(**kwargs)
    except (ValueError, TypeError) as exc:
        raise StartEntryError(f"invalid start URL entry: {exc}") from None
