"""Start URLs fed through Redis, the scrapy-redis way: ``LPUSH <spider>:start_urls URL``.

An entry is either a URL or a JSON object ``{"url", "meta", "method", "body", "headers"}``
(optionally also ``"priority"``, ``"dont_filter"``, ``"callback"``). A spider that defines
``make_request_from_data(data: bytes)`` (as scrapy-redis's ``RedisSpider`` users do) builds the
request itself. The scheduler consumes the key in batches while the crawl runs.

:func:`start_entry` checks an entry without a spider, the way a worker will: ``crawlfleet seed``
uses it, so the command refuses exactly what a worker would dead-letter (except a callback the
spider lacks). Every problem is a one-line :class:`StartEntryError`.
"""

from __future__ import annotations

from typing import Any

from scrapy import Request, Spider

from crawlfleet.frontier.serialization import (
    MAX_DEPTH,
    DecodeError,
    EntryPolicy,
    callback_problem,
    headers_problem,
    method_problem,
    one_line,
    parse_json,
    priority_problem,
    quote,
    spider_method,
    tree_problem,
)

_FIELDS = {"url", "meta", "method", "body", "headers", "priority", "dont_filter", "callback"}
_TYPES: tuple[tuple[str, type], ...] = (
    ("meta", dict),
    ("headers", dict),
    ("method", str),
    ("body", str),
    ("dont_filter", bool),
    ("callback", str),
)


class StartEntryError(ValueError):
    """A start_urls entry that cannot become a request; the message says why."""


def start_entry(text: str, policy: EntryPolicy) -> dict[str, Any]:
    """The request fields of one entry (a URL, or a JSON object starting with ``{``)."""
    if not text.startswith("{"):
        problem = policy.url_problem(text)
        if problem:
            raise StartEntryError(f"invalid start URL: {problem}")
        return {"url": text}
    try:
        data = parse_json(text, MAX_DEPTH)
    except DecodeError as exc:
        raise StartEntryError(f"invalid JSON in start URL entry ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise StartEntryError(
            "a JSON entry must be an object with a \"url\" string ('url' missing or not a string)"
        )
    problem = policy.url_problem(data["url"])
    if problem:
        raise StartEntryError(f'"url" {quote(data["url"])} is {problem}')
    unknown = set(data) - _FIELDS
    if unknown:
        names = ", ".join(quote(n, 40) for n in sorted(unknown)[:5])
        raise StartEntryError(f"unknown field(s) in start URL entry: {names}")
    for name, kind in _TYPES:
        if name in data and not isinstance(data[name], kind):
            raise StartEntryError(f"start URL entry field {name!r} must be a {kind.__name__}")
    if "priority" in data:
        problem = priority_problem(data["priority"])
        if problem:
            raise StartEntryError(f"start URL entry field 'priority' {problem}")
    if "callback" in data:
        problem = callback_problem(data["callback"])
        if problem:
            raise StartEntryError(f"start URL entry field 'callback': {problem}")
    for name, check in (("method", method_problem), ("headers", headers_problem)):
        problem = check(data[name]) if name in data else None
        if problem:
            raise StartEntryError(f"start URL entry field {name!r}: {problem}")
    problem = tree_problem(data)
    if problem:
        raise StartEntryError(f"start URL entry: {problem}")
    return data


def request_from_entry(raw: bytes, spider: Spider, policy: EntryPolicy | None = None) -> Request:
    """The request for one start_urls entry; whatever is wrong raises :class:`StartEntryError`."""
    policy = policy if policy is not None else EntryPolicy.for_spider(spider)
    try:
        return _request(raw, spider, policy)
    except StartEntryError:
        raise
    except Exception as exc:  # whatever Scrapy's constructors raise on odd values
        raise StartEntryError(f"invalid start URL entry: {one_line(exc)}") from None


def _request(raw: bytes, spider: Spider, policy: EntryPolicy) -> Request:
    maker = getattr(spider, "make_request_from_data", None)
    if callable(maker):
        try:
            made = maker(raw)
        except Exception as exc:
            raise StartEntryError(f"make_request_from_data failed: {one_line(exc)}") from None
        if not isinstance(made, Request):
            raise StartEntryError("make_request_from_data did not return a Request")
        problem = policy.url_problem(made.url)
        if problem:
            raise StartEntryError(f"make_request_from_data made {quote(made.url)}: {problem}")
        return made
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise StartEntryError("start URL entry is not UTF-8") from None
    data = start_entry(text, policy)
    kwargs: dict[str, Any] = {k: v for k, v in data.items() if k != "callback"}
    if "callback" in data:
        try:
            kwargs["callback"] = spider_method(spider, data["callback"])
        except DecodeError as exc:
            raise StartEntryError(f"start URL entry field 'callback': {exc}") from None
    try:
        request = Request(**kwargs)
    except (ValueError, TypeError) as exc:
        raise StartEntryError(f"invalid start URL entry: {one_line(exc)}") from None
    problem = policy.url_problem(request.url)  # what Scrapy made of it is what is fetched
    if problem:
        raise StartEntryError(f"start URL {quote(request.url)}: {problem}")
    return request
