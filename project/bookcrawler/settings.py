"""Scrapy settings of the book crawl; deployment values come from the worker environment.

The environment (docs/design.md, Contracts; rendered by Ansible into /etc/crawlfleet/crawler.env):
``REDIS_URL``, ``PROXYPOOL_URL``, ``PROXYPOOL_API_KEY``, ``ACCOUNTPOOL_URL``,
``ACCOUNTPOOL_API_KEY``, ``BOOK_SITE_URL``. A pool whose URL is empty disables its middleware
(Scrapy logs "Disabled …: PROXYPOOL_URL is not set"). With the inventory's
``crawler_queue_backend: rabbitmq`` it also has ``SCHEDULER_QUEUE_CLASS`` and ``RABBITMQ_URL``.
"""

import os

BOT_NAME = "bookcrawler"
SPIDER_MODULES = ["bookcrawler.spiders"]
NEWSPIDER_MODULE = "bookcrawler.spiders"
ROBOTSTXT_OBEY = False

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
BOOK_SITE_URL = os.environ.get("BOOK_SITE_URL", "http://127.0.0.1:8000")
PROXYPOOL_URL = os.environ.get("PROXYPOOL_URL", "")
PROXYPOOL_API_KEY = os.environ.get("PROXYPOOL_API_KEY", "")
ACCOUNTPOOL_URL = os.environ.get("ACCOUNTPOOL_URL", "")
ACCOUNTPOOL_API_KEY = os.environ.get("ACCOUNTPOOL_API_KEY", "")

# The shared frontier on the hub (drop-in names of scrapy-redis).
SCHEDULER = "crawlfleet.frontier.scheduler.Scheduler"
DUPEFILTER_CLASS = "crawlfleet.frontier.dupefilter.BloomDupeFilter"
SCHEDULER_PERSIST = True
# Where the crawl queue lives: the frontier's default (Redis: with politeness on, a queue per
# site, KeyedPriorityQueue) unless the environment names crawlfleet.frontier.rabbitmq.PriorityQueue
# and its broker; the duplicate filter stays in Redis.
SCHEDULER_QUEUE_CLASS = os.environ.get("SCHEDULER_QUEUE_CLASS", "")
RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
# Replicas an enqueue waits for: the frontier's default (1 through Sentinel and on a cluster)
# unless the environment says otherwise (0 on a Redis Cluster without replicas).
if os.environ.get("SCHEDULER_WAIT_REPLICAS"):
    SCHEDULER_WAIT_REPLICAS = int(os.environ["SCHEDULER_WAIT_REPLICAS"])
# Sized for catalogues up to a million requests (about 1.7 MiB in Redis, 0.1 % false positives).
BLOOMFILTER_CAPACITY = int(os.environ.get("BLOOMFILTER_CAPACITY", "1000000"))
BLOOMFILTER_ERROR_RATE = 0.001

# Proxy and token on every request, before Scrapy's HttpProxyMiddleware (750) reads meta["proxy"];
# then a slot of the cluster's rate budget for the (site, proxy) pair (docs/reference/settings.md).
DOWNLOADER_MIDDLEWARES = {
    "crawlfleet.middlewares.ProxyMiddleware": 740,
    "crawlfleet.middlewares.AuthorizationMiddleware": 745,
    "crawlfleet.politeness.middleware.PolitenessMiddleware": 750,
}
# No rate of the site is written here: each (site, proxy) pair learns its own limit for the whole
# cluster from the site's bans and response times (docs/reference/settings.md, Politeness).
POLITENESS_ENABLED = os.environ.get("CRAWLER_POLITENESS", "true").lower() not in ("0", "false")
ACCOUNTPOOL_SITE = "demosite"

ITEM_PIPELINES = {"crawlfleet.pipelines.RedisItemsPipeline": 300}
# Throughput samples and Scrapy stats of each worker on the hub: `crawlfleet status`, the
# dashboard and its /metrics read them.
EXTENSIONS = {"crawlfleet.extensions.workerstats.WorkerStats": 500}

# Each proxy is its own download slot (see ProxyMiddleware): these limits are per proxy address.
CONCURRENT_REQUESTS = int(os.environ.get("CRAWLER_CONCURRENT_REQUESTS", "32"))
CONCURRENT_REQUESTS_PER_DOMAIN = int(os.environ.get("CRAWLER_CONCURRENT_PER_PROXY", "8"))
# Seconds between two requests of one worker through one proxy (randomized 0.5x-1.5x, Scrapy's
# RANDOMIZE_DOWNLOAD_DELAY): keeps each proxy under the target's per-address rate limit.
DOWNLOAD_DELAY = float(os.environ.get("CRAWLER_DOWNLOAD_DELAY", "0"))
DOWNLOAD_TIMEOUT = 15
RETRY_TIMES = 3
LOG_LEVEL = os.environ.get("CRAWLER_LOG_LEVEL", "INFO")
TELNETCONSOLE_ENABLED = False
