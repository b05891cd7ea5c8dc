"""The book crawl's queue backend from the worker environment: Redis (a queue per site, politeness
being on) unless crawler.env names the RabbitMQ queue class and its broker; a wrong class stops
the scheduler with one line."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.test import get_crawler

import bookcrawler.settings
from bookcrawler.spiders.book import BookSpider
from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.frontier.queues import KeyedPriorityQueue
from crawlfleet.frontier.queues import PriorityQueue as RedisPriorityQueue
from crawlfleet.frontier.rabbitmq import PriorityQueue as RabbitPriorityQueue
from crawlfleet.frontier.rabbitmq.queue import DEFAULT_RABBITMQ_URL, RabbitSettings

BACKEND_ENV = ("SCHEDULER_QUEUE_CLASS", "RABBITMQ_URL")
# What the crawler role writes into crawler.env with crawler_queue_backend: rabbitmq.
RABBITMQ_ENV = {
    "SCHEDULER_QUEUE_CLASS": "crawlfleet.frontier.rabbitmq.PriorityQueue",
    "RABBITMQ_URL": "amqp://crawlfleet:p%2Fss-0123456789ab@hub:5672/crawlfleet",
}

Loader = Callable[[dict[str, str]], ModuleType]


@pytest.fixture
def load_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loader]:
    """Re-import bookcrawler.settings under a given environment; restored afterwards."""

    def load(env: dict[str, str]) -> ModuleType:
        for name in BACKEND_ENV:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return importlib.reload(bookcrawler.settings)

    yield load
    monkeypatch.undo()
    importlib.reload(bookcrawler.settings)


def crawler_of(module: ModuleType, **overrides: Any) -> Any:
    settings = {name: getattr(module, name) for name in dir(module) if name.isupper()}
    return get_crawler(BookSpider, {**settings, **overrides})


def test_without_the_environment_the_queue_stays_on_redis(load_settings: Loader) -> None:
    settings = load_settings({})
    assert settings.SCHEDULER_QUEUE_CLASS == ""  # the frontier's default
    assert settings.RABBITMQ_URL == DEFAULT_RABBITMQ_URL
    assert settings.SCHEDULER == "crawlfleet.frontier.scheduler.Scheduler"
    crawler = crawler_of(settings)
    config = FrontierConfig.from_settings(crawler.settings, "book", politeness=True)
    assert config.queue_class is KeyedPriorityQueue
    assert FrontierConfig.from_settings(crawler.settings, "book").queue_class is RedisPriorityQueue


def test_the_rabbitmq_environment_selects_the_rabbitmq_queue(load_settings: Loader) -> None:
    settings = load_settings(RABBITMQ_ENV)
    assert {name: getattr(settings, name) for name in BACKEND_ENV} == RABBITMQ_ENV
    # the scheduler is unchanged: it hands the queue to the RabbitMQ scheduler itself
    assert settings.SCHEDULER == "crawlfleet.frontier.scheduler.Scheduler"
    assert settings.DUPEFILTER_CLASS == "crawlfleet.frontier.dupefilter.BloomDupeFilter"
    crawler = crawler_of(settings)
    assert FrontierConfig.from_settings(crawler.settings, "book").queue_class is RabbitPriorityQueue
    assert RabbitSettings.from_settings(crawler.settings).url == RABBITMQ_ENV["RABBITMQ_URL"]


@pytest.mark.parametrize(
    ("queue_class", "expected"),
    [
        ("crawlfleet.frontier.rabbitmq.PriorityQueu", "cannot load"),
        ("crawlfleet.frontier.rabbitmqq.PriorityQueue", "cannot load"),
        ("rabbitmq", "cannot load"),
        ("builtins.dict", "must be one of"),
    ],
)
def test_a_wrong_queue_class_stops_the_scheduler_with_one_line(
    load_settings: Loader, queue_class: str, expected: str
) -> None:
    env = {**RABBITMQ_ENV, "SCHEDULER_QUEUE_CLASS": queue_class}
    settings = load_settings(env)
    assert {name: getattr(settings, name) for name in BACKEND_ENV} == env
    # Nothing listens on port 1: the class is checked before any connection is made.
    crawler = crawler_of(settings, REDIS_URL="redis://127.0.0.1:1/0")
    scheduler_class = load_object(crawler.settings["SCHEDULER"])
    with pytest.raises(FrontierConfigError) as info:
        build_from_crawler(scheduler_class, crawler)  # as Scrapy's engine builds it
    message = str(info.value)
    assert message.startswith("SCHEDULER_QUEUE_CLASS")
    assert expected in message and repr(queue_class) in message
    assert "\n" not in message
