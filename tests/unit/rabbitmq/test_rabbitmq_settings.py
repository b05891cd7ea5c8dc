"""RabbitMQ queue settings and URLs, checked without a broker."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from crawlfleet.frontier.config import FrontierConfig, FrontierConfigError
from crawlfleet.frontier.rabbitmq import BrokerConfigError, PriorityQueue
from crawlfleet.frontier.rabbitmq.client import mask_amqp, parameters
from crawlfleet.frontier.rabbitmq.queue import RabbitSettings


def test_defaults() -> None:
    rs = RabbitSettings.from_settings(Settings())
    assert rs.url == "amqp://guest:guest@127.0.0.1:5672/%2F"
    assert (rs.max_priority, rs.priority_offset) == (100, 0)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("SCHEDULER_QUEUE_MAX_PRIORITY", 0, "must be 1 … 255"),
        ("SCHEDULER_QUEUE_MAX_PRIORITY", 256, "must be 1 … 255"),
        ("SCHEDULER_QUEUE_MAX_PRIORITY", "ten", "must be an integer"),
        ("SCHEDULER_QUEUE_PRIORITY_OFFSET", 1.5, "must be an integer"),
        ("RABBITMQ_CONNECT_TIMEOUT", -1, "must be > 0"),
        ("RABBITMQ_RECONNECT_MAX_DELAY", "soon", "must be a number of seconds"),
    ],
)
def test_bad_settings_name_the_setting(name: str, value: object, expected: str) -> None:
    with pytest.raises(FrontierConfigError) as info:
        RabbitSettings.from_settings(Settings({name: value}))
    assert name in str(info.value) and expected in str(info.value)


def test_message_priority_is_offset_and_clamped() -> None:
    queue = PriorityQueue.from_settings(
        Settings({"SCHEDULER_QUEUE_MAX_PRIORITY": 10, "SCHEDULER_QUEUE_PRIORITY_OFFSET": 5}),
        "q",
        prefetch=1,
    )
    assert [queue.message_priority(p) for p in (-20, -5, 0, 3, 5, 99)] == [0, 0, 5, 8, 10, 10]


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "", "127.0.0.1:5672", "amqp://u:p@host:notaport/%2F"]
)
def test_bad_url_is_a_one_line_error_without_password(url: str) -> None:
    with pytest.raises(BrokerConfigError) as info:
        parameters(url, 1.0)
    assert "RABBITMQ_URL" in str(info.value)
    assert "\n" not in str(info.value)
    assert ":p@" not in str(info.value)


def test_frontier_config_accepts_the_rabbitmq_queue_class() -> None:
    settings = Settings({"SCHEDULER_QUEUE_CLASS": "crawlfleet.frontier.rabbitmq.PriorityQueue"})
    assert FrontierConfig.from_settings(settings, "book").queue_class is PriorityQueue
    with pytest.raises(FrontierConfigError, match=r"crawlfleet\.frontier\.rabbitmq\.PriorityQueue"):
        FrontierConfig.from_settings(Settings({"SCHEDULER_QUEUE_CLASS": "builtins.dict"}), "b")


def test_a_sharded_rabbitmq_crawl_is_refused() -> None:
    # the broker's queue is one queue: SCHEDULER_SHARDS would silently do nothing
    rabbit = "crawlfleet.frontier.rabbitmq.PriorityQueue"
    settings = Settings({"SCHEDULER_QUEUE_CLASS": rabbit, "SCHEDULER_SHARDS": "3"})
    with pytest.raises(FrontierConfigError, match=r"^SCHEDULER_SHARDS is 3, but only the Redis "):
        FrontierConfig.from_settings(settings, "book")
    one = Settings({"SCHEDULER_QUEUE_CLASS": rabbit, "SCHEDULER_SHARDS": 1})
    assert FrontierConfig.from_settings(one, "book").shards == 1


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("amqp://crawl:s3cret@hub:5672/crawl", "amqp://crawl:***@hub:5672/crawl"),
        ("amqp://crawl:s3cret@hub:bad/crawl", "amqp://crawl:***@hub:bad/crawl"),
        ("amqp://hub:5672/%2F", "amqp://hub:5672/%2F"),
    ],
)
def test_mask_amqp_hides_the_password(url: str, masked: str) -> None:
    assert mask_amqp(url) == masked
