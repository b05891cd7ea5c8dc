"""Middleware and pipeline configuration: NotConfigured, bad settings, back-off, item encoding."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from bookcrawler.items import BookItem
from crawlfleet.middlewares import AuthorizationMiddleware, ProxyMiddleware
from crawlfleet.middlewares.poolclient import Backoff
from crawlfleet.middlewares.proxy import proxy_url
from crawlfleet.pipelines import RedisItemsPipeline, encode_item


def build(cls: Any, settings: dict[str, Any]) -> Any:
    """Build inside a running asyncio loop, as under Scrapy's asyncio reactor."""

    async def make() -> Any:
        return cls.from_crawler(get_crawler(settings_dict=settings))

    return asyncio.run(make())


@pytest.mark.parametrize(
    ("cls", "settings", "reason"),
    [
        (ProxyMiddleware, {"PROXYPOOL_ENABLED": False, "PROXYPOOL_URL": "http://h:1"}, "ENABLED"),
        (ProxyMiddleware, {}, "PROXYPOOL_URL is not set"),
        (ProxyMiddleware, {"PROXYPOOL_URL": "ftp://h:1"}, "http:// or https://"),
        (AuthorizationMiddleware, {"AUTHORIZATION_ENABLED": False}, "ENABLED"),
        (AuthorizationMiddleware, {"ACCOUNTPOOL_URL": " "}, "ACCOUNTPOOL_URL is not set"),
        (RedisItemsPipeline, {"REDIS_URL": ""}, "REDIS_URL is not set"),
    ],
)
def test_not_configured(cls: Any, settings: dict[str, Any], reason: str) -> None:
    with pytest.raises(NotConfigured, match=reason):
        build(cls, settings)


@pytest.mark.parametrize(
    ("cls", "settings", "message"),
    [
        (ProxyMiddleware, {"PROXYPOOL_URL": "http://h:1", "PROXYPOOL_BATCH_SIZE": 0}, "BATCH_SIZE"),
        (ProxyMiddleware, {"PROXYPOOL_URL": "http://h:1", "PROXYPOOL_BACKOFF_BASE": 0}, "back-off"),
        (
            AuthorizationMiddleware,
            {"ACCOUNTPOOL_URL": "http://h:1", "AUTHORIZATION_FORMAT": "jwt"},
            "{token}",
        ),
        (RedisItemsPipeline, {"REDIS_URL": "redis://h:1", "ITEMS_BATCH_SIZE": 0}, "BATCH_SIZE"),
    ],
)
def test_bad_settings_fail_with_the_setting_name(
    cls: Any, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build(cls, settings)


def test_middlewares_refuse_to_run_without_asyncio() -> None:
    crawler = get_crawler(settings_dict={"PROXYPOOL_URL": "http://127.0.0.1:1"})
    with pytest.raises(RuntimeError, match="AsyncioSelectorReactor"):
        ProxyMiddleware.from_crawler(crawler)


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(0.5, 4.0)
    delays = [backoff.next_delay() for _ in range(6)]
    caps = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert all(cap / 2 <= d <= cap for d, cap in zip(delays, caps, strict=True))
    backoff.reset()
    assert backoff.next_delay() <= 0.5
    with pytest.raises(ValueError, match="back-off"):
        Backoff(2.0, 1.0)


def test_proxy_url_accepts_both_pool_formats() -> None:
    assert proxy_url("127.0.0.1:3128") == "http://127.0.0.1:3128"
    assert proxy_url("http://u:p@h:8080") == "http://u:p@h:8080"


def test_items_are_encoded_with_their_id() -> None:
    item = BookItem(id="1234567", name="Río", authors=["A"], comments=[{"id": "1"}])
    fields = encode_item(item, "id")
    assert fields["id"] == "1234567"
    assert json.loads(fields["item"]) == dict(item)
    assert "Río" in fields["item"]  # kept readable, not \u-escaped
    assert encode_item({"name": "x"}, "id")["id"] == ""
