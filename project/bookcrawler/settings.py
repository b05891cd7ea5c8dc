"""Scrapy settings of the book crawl; deployment values come from the worker environment.

The environment (DESIGN.md §3, rendered by Ansible into /etc/crawlfleet/crawler.env):
``REDIS_URL``, ``PROXYPOOL_URL``, ``PROXYPOOL_API_KEY``, ``ACCOUNTPOOL_URL``,
``ACCOUNTPOOL_API_KEY``, ``BOOK_SITE_URL``. A pool whose URL is empty disables its middleware
(Scrapy logs "Disabled …: PROXYPOOL_URL is not set").
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
# Sized for catalogues up to a million requests (about 1.7 MiB in Redis, 0.1 % false positives).
BLOOMFILTER_CAPACITY = int(os.environ.get("BLOOMFILTER_CAPACITY", "1000000"))
BLOOMFILTER_ERROR_RATE = 0.001

# Proxy and token on every request, before Scrapy's HttpProxyMiddleware (750) reads meta["proxy"].
DOWNLOADER_MIDDLEWARES = {
    "crawlfleet.middlewares.ProxyMiddleware": 740,
    "crawlfleet.middlewares.AuthorizationMiddleware": 745,
}
ACCOUNTPOOL_SITE = "demosite"

ITEM_PIPELINES = {"crawlfleet.pipelines.RedisItemsPipeline": 300}

# Each proxy is its own download slot (see ProxyMiddleware): these limits are per proxy address.
CONCURRENT_REQUESTS = int(os.environ.get("CRAWLER_CONCURRENT_REQUESTS", "32"))
CONCURRENT_REQUESTS_PER_DOMAIN = int(os.environ.get("CRAWLER_CONCURRENT_PER_PROXY", "8"))
DOWNLOAD_TIMEOUT = 15
RETRY_TIMES = 3
LOG_LEVEL = os.environ.get("CRAWLER_LOG_LEVEL", "INFO")
TELNETCONSOLE_ENABLED = False
