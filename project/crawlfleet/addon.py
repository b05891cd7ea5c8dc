"""The Scrapy add-on that turns any Scrapy project into a fleet worker: ``ADDONS``.

One line in a project's settings (Scrapy >= 2.10 add-ons)::

    ADDONS = {"crawlfleet.addon.Fleet": 0}

enables the shared frontier (scheduler and Bloom-filter duplicate filter on the hub's Redis), the
proxy and authorization downloader middlewares (clients of the hub's two pools), the politeness
middleware (the cluster's rate budget per site on the hub: ``POLITENESS_*``), the items
pipeline and the worker stats extension, each configured from the worker environment of the
fleet: ``REDIS_URL``, ``PROXYPOOL_URL``, ``PROXYPOOL_API_KEY``, ``ACCOUNTPOOL_URL``,
``ACCOUNTPOOL_API_KEY``, ``ACCOUNTPOOL_SITE``, ``SCHEDULER_QUEUE_CLASS``, ``RABBITMQ_URL``,
``POLITENESS_SITES`` (the inventory's per-site rates, JSON; see docs/reference/settings.md),
``SCHEDULER_WAIT_REPLICAS`` and ``SCHEDULER_SHARDS``.

Priorities follow Scrapy's: the add-on sets everything at ``addon`` priority, so whatever the
project (or the spider, or ``-s``) set explicitly keeps its value; a component the project already
lists at any position stays where it is. On the fleet (``crawlfleet.fleetsettings`` sets
``FLEET_ENVIRONMENT_WINS``) the worker environment's values win over the project's, just below
the spider's ``custom_settings`` and ``-s``. With the PolitenessMiddleware on, an unset
``SCHEDULER_QUEUE_CLASS`` means the frontier's queue per site (``KeyedPriorityQueue``). A
component whose URL is empty in both the settings and the environment is left out, with one logged
line saying why (no Redis URL: the whole frontier is off and Scrapy's own scheduler runs, so the
project still crawls alone). A setting that looks like crawlfleet's but is no row of its settings
table (``crawlfleet.settingtable``: a typo, or scrapy-redis's name for it) is one warning line
saying what it probably meant.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from scrapy.settings import BaseSettings, default_settings, get_settings_priority
from scrapy.utils.misc import load_object

from crawlfleet.settingtable import unknown

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

__all__ = ["COMPONENTS", "ENVIRONMENT", "Fleet"]

# Worker environment variables read into the settings of the same name (docs/design.md, Contracts).
ENVIRONMENT = (
    "REDIS_URL",
    "PROXYPOOL_URL",
    "PROXYPOOL_API_KEY",
    "ACCOUNTPOOL_URL",
    "ACCOUNTPOOL_API_KEY",
    "ACCOUNTPOOL_SITE",
    "SCHEDULER_QUEUE_CLASS",
    "RABBITMQ_URL",
    # per-site politeness rates from the inventory (crawler_politeness_sites), as JSON
    "POLITENESS_SITES",
    # 0 on a Redis Cluster without replicas (crawlfleet_redis_cluster_replicas 0)
    "SCHEDULER_WAIT_REPLICAS",
    # one crawl split over a Redis Cluster's primaries (crawler_extra_env, docs/deploy.md)
    "SCHEDULER_SHARDS",
)

# (component priority dict setting, component path, order, the setting naming its URL)
COMPONENTS: tuple[tuple[str, str, int, str], ...] = (
    ("DOWNLOADER_MIDDLEWARES", "crawlfleet.middlewares.ProxyMiddleware", 740, "PROXYPOOL_URL"),
    (
        "DOWNLOADER_MIDDLEWARES",
        "crawlfleet.middlewares.AuthorizationMiddleware",
        745,
        "ACCOUNTPOOL_URL",
    ),
    (
        "DOWNLOADER_MIDDLEWARES",
        "crawlfleet.politeness.middleware.PolitenessMiddleware",
        750,
        "REDIS_URL",
    ),
    ("ITEM_PIPELINES", "crawlfleet.pipelines.RedisItemsPipeline", 300, "REDIS_URL"),
    ("EXTENSIONS", "crawlfleet.extensions.workerstats.WorkerStats", 500, "REDIS_URL"),
)

# The frontier's settings, each only where the project left it at Scrapy's default.
FRONTIER: dict[str, object] = {
    "SCHEDULER": "crawlfleet.frontier.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "crawlfleet.frontier.dupefilter.BloomDupeFilter",
    # never wipe the shared crawl when one worker stops
    "SCHEDULER_PERSIST": True,
}

_ADDON = "addon"
# Scrapy's own settings (SCHEDULER_DEBUG, DUPEFILTER_CLASS …), never taken for a typo of ours.
SCRAPY_NAMES = frozenset(name for name in vars(default_settings) if name.isupper())


def _explicit(settings: BaseSettings, name: str) -> bool:
    """Whether the project, the spider or the command line set ``name`` (not Scrapy's defaults)."""
    priority = settings.getpriority(name)
    return priority is not None and priority > get_settings_priority(_ADDON)


class Fleet:
    """``ADDONS = {"crawlfleet.addon.Fleet": 0}``: this project's spiders crawl on the fleet."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Fleet:
        return cls()

    def update_settings(self, settings: BaseSettings) -> None:
        # On the fleet (crawlfleet.fleetsettings) the worker environment is the deployment's
        # word: it overrides what the project wrote for its developers' machines.
        environment_wins = settings.getbool("FLEET_ENVIRONMENT_WINS")
        priority = get_settings_priority("project") + 1 if environment_wins else _ADDON
        for name in ENVIRONMENT:
            value = self.environ.get(name, "").strip()
            if value and (environment_wins or not _explicit(settings, name)):
                settings.set(name, value, priority)
        if not settings.get("REDIS_URL"):
            logger.warning(
                "crawlfleet: REDIS_URL is not set (settings or environment); the frontier, the "
                "items pipeline and the worker stats are off and Scrapy's own scheduler runs"
            )
        else:
            for setting, default in FRONTIER.items():
                if not _explicit(settings, setting):
                    settings.set(setting, default, _ADDON)
        for dict_name, path, order, url_setting in COMPONENTS:
            if not settings.get(url_setting):
                logger.info("crawlfleet: %s is off: %s is not set", path, url_setting)
                continue
            settings.setdefault_in_component_priority_dict(dict_name, load_object(path), order)
        # a name that looks like crawlfleet's but is none would be ignored without a word
        for line in unknown(settings, SCRAPY_NAMES):
            logger.warning("crawlfleet: %s", line)
