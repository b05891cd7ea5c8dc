"""The Fleet add-on: components and worker environment at add-on priority, the project's win."""

from __future__ import annotations

import logging

import pytest
from scrapy import Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from bookcrawler import settings as book
from crawlfleet.addon import Fleet
from crawlfleet.extensions.workerstats import WorkerStats
from crawlfleet.middlewares import AuthorizationMiddleware, ProxyMiddleware
from crawlfleet.pipelines import RedisItemsPipeline
from crawlfleet.politeness.middleware import PolitenessMiddleware

FLEET_ENV = {
    "REDIS_URL": "redis://:pw@hub:6379/0",
    "PROXYPOOL_URL": "http://hub:5555",
    "PROXYPOOL_API_KEY": "k" * 32,
    "ACCOUNTPOOL_URL": "http://hub:6777",
    "ACCOUNTPOOL_API_KEY": "a" * 32,
}


def _applied(project: dict[str, object], environ: dict[str, str]) -> Settings:
    settings = Settings()
    settings.setdict(project, priority="project")
    Fleet(environ).update_settings(settings)
    return settings


def _components(settings: Settings, name: str) -> dict[object, object]:
    return dict(settings.getdict(name))


def test_every_component_from_the_worker_environment() -> None:
    settings = _applied({}, FLEET_ENV)
    assert settings["SCHEDULER"] == "crawlfleet.frontier.scheduler.Scheduler"
    assert settings["DUPEFILTER_CLASS"] == "crawlfleet.frontier.dupefilter.BloomDupeFilter"
    assert settings.getbool("SCHEDULER_PERSIST") is True
    assert settings["REDIS_URL"] == FLEET_ENV["REDIS_URL"]
    assert settings["PROXYPOOL_API_KEY"] == FLEET_ENV["PROXYPOOL_API_KEY"]
    assert settings.getpriority("REDIS_URL") == 15  # Scrapy's "addon" priority
    assert _components(settings, "DOWNLOADER_MIDDLEWARES") == {
        ProxyMiddleware: 740,
        AuthorizationMiddleware: 745,
        PolitenessMiddleware: 750,
    }
    assert _components(settings, "ITEM_PIPELINES") == {RedisItemsPipeline: 300}
    assert _components(settings, "EXTENSIONS") == {WorkerStats: 500}


def test_the_projects_explicit_settings_keep_priority() -> None:
    project = {
        "REDIS_URL": "redis://127.0.0.1:6390/3",
        "DUPEFILTER_CLASS": "crawlfleet.frontier.dupefilter.SetDupeFilter",
        "SCHEDULER_PERSIST": False,
        "ITEM_PIPELINES": {"crawlfleet.pipelines.RedisItemsPipeline": 900, "a.b.C": 100},
    }
    settings = _applied(project, FLEET_ENV)
    assert settings["REDIS_URL"] == "redis://127.0.0.1:6390/3"
    assert settings["DUPEFILTER_CLASS"] == "crawlfleet.frontier.dupefilter.SetDupeFilter"
    assert settings.getbool("SCHEDULER_PERSIST") is False
    # a component the project already lists stays where the project put it
    assert _components(settings, "ITEM_PIPELINES") == {
        "crawlfleet.pipelines.RedisItemsPipeline": 900,
        "a.b.C": 100,
    }


def test_a_component_without_its_url_is_skipped_with_a_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="crawlfleet.addon"):
        settings = _applied({}, {"REDIS_URL": "redis://hub:6379/0", "PROXYPOOL_URL": " "})
    assert _components(settings, "DOWNLOADER_MIDDLEWARES") == {PolitenessMiddleware: 750}
    assert settings["SCHEDULER"] == "crawlfleet.frontier.scheduler.Scheduler"
    assert "crawlfleet.middlewares.ProxyMiddleware is off: PROXYPOOL_URL is not set" in caplog.text
    assert "AuthorizationMiddleware is off: ACCOUNTPOOL_URL is not set" in caplog.text


def test_no_redis_url_leaves_scrapys_scheduler(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="crawlfleet.addon"):
        settings = _applied({}, {})
    assert settings["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    assert _components(settings, "ITEM_PIPELINES") == {}
    assert "REDIS_URL is not set" in caplog.text


def test_scrapy_loads_it_from_addons() -> None:
    class Plain(Spider):
        name = "plain"

    crawler = get_crawler(
        Plain, {"ADDONS": {"crawlfleet.addon.Fleet": 0}, "REDIS_URL": "redis://hub:6379/0"}
    )
    crawler._apply_settings()
    assert crawler.settings["SCHEDULER"] == "crawlfleet.frontier.scheduler.Scheduler"


def test_on_the_fleet_the_environment_wins_over_the_project() -> None:
    project = {"REDIS_URL": "redis://127.0.0.1:6379/0", "FLEET_ENVIRONMENT_WINS": True}
    settings = _applied(project, FLEET_ENV)
    assert settings["REDIS_URL"] == FLEET_ENV["REDIS_URL"]
    assert settings.getpriority("REDIS_URL") == 21  # above the project, below the spider
    settings.set("REDIS_URL", "redis://other:6379/0", "cmdline")
    assert settings["REDIS_URL"] == "redis://other:6379/0"  # -s still wins


def test_on_the_fleet_the_inventory_sets_per_site_politeness_rates() -> None:
    from crawlfleet.politeness.config import PolitenessConfig

    project = {
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "FLEET_ENVIRONMENT_WINS": True,
        "POLITENESS_SITES": {"books.example": 2},
    }
    settings = _applied(project, {**FLEET_ENV, "POLITENESS_SITES": '{"books.example": 9}'})
    config = PolitenessConfig.from_settings(settings, "book")
    assert config.limits_for("books.example").rate == 9  # the inventory's word
    with pytest.raises(ValueError, match="POLITENESS_SITES is not valid JSON"):
        PolitenessConfig.from_settings(_applied(project, {"POLITENESS_SITES": "{"}), "book")


def test_on_the_fleet_the_inventory_shards_the_crawl() -> None:
    from crawlfleet.frontier.config import FrontierConfigError, shards_setting

    project = {"REDIS_URL": "redis://127.0.0.1:6379/0", "FLEET_ENVIRONMENT_WINS": True}
    assert shards_setting(_applied(project, FLEET_ENV)) == 1
    assert shards_setting(_applied(project, {**FLEET_ENV, "SCHEDULER_SHARDS": "3"})) == 3
    with pytest.raises(FrontierConfigError, match=r"^SCHEDULER_SHARDS .*three"):
        shards_setting(_applied(project, {**FLEET_ENV, "SCHEDULER_SHARDS": "three"}))


def test_fleet_settings_take_the_project_module_and_add_the_addon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the module applies CRAWLFLEET_PROJECT_SETTINGS when imported, as Scrapy imports it
    monkeypatch.setenv("CRAWLFLEET_PROJECT_SETTINGS", "bookcrawler.settings")
    from crawlfleet.fleetsettings import FleetSettingsError, project_settings

    values = project_settings("bookcrawler.settings")
    assert values["BOT_NAME"] == "bookcrawler"
    assert values["ADDONS"] == {"crawlfleet.addon.Fleet": 0}
    assert values["FLEET_ENVIRONMENT_WINS"] is True
    assert not any(name.startswith("_") or not name.isupper() for name in values)
    with pytest.raises(FleetSettingsError, match="CRAWLFLEET_PROJECT_SETTINGS is not set"):
        project_settings("")
    with pytest.raises(FleetSettingsError, match=r"'nosuch\.settings' does not import"):
        project_settings("nosuch.settings")


def test_a_setting_that_looks_ours_but_is_none_is_one_warning_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    project = {
        "POLITENESS_MAX_RATES": 5,  # a typo: the cap would silently not apply
        "SCHEDULER_DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",  # scrapy-redis's
        "SCHEDULER_DEBUG": True,  # Scrapy's own
        "POLITENESS_MAX_RATE": 5,  # ours
        "MY_OWN_SETTING": 1,  # the project's, with no prefix of ours
    }
    with caplog.at_level(logging.WARNING, logger="crawlfleet.addon"):
        _applied(project, FLEET_ENV)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "crawlfleet: POLITENESS_MAX_RATES is no crawlfleet setting and is ignored; did you mean "
        "POLITENESS_MAX_RATE?",
        "crawlfleet: SCHEDULER_DUPEFILTER_CLASS is not read by crawlfleet: set DUPEFILTER_CLASS",
    ]


def test_the_book_projects_settings_raise_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    project = {name: value for name, value in vars(book).items() if name.isupper()}
    with caplog.at_level(logging.WARNING, logger="crawlfleet.addon"):
        _applied(project, FLEET_ENV)
    assert [r.getMessage() for r in caplog.records if "crawlfleet setting" in r.getMessage()] == []
