"""The soak's project: a classic Scrapy project whose one fleet line is ADDONS. Everything of the
fleet (REDIS_URL, the pools) comes from the worker environment, as on a worker host; nothing
about the target's limits is written here (the politeness budget learns them)."""

import os

BOT_NAME = "soakproject"
SPIDER_MODULES = ["soakproject.spiders"]
NEWSPIDER_MODULE = "soakproject.spiders"
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
COOKIES_ENABLED = False
CONCURRENT_REQUESTS = 32
DOWNLOAD_TIMEOUT = 30
# What a crawl of many sites retries: server errors, timeouts, and the bans the budget learns from.
RETRY_TIMES = 5
RETRY_HTTP_CODES = [500, 502, 503, 504, 522, 524, 408, 429, 403]
LOG_LEVEL = "INFO"

ADDONS = {"crawlfleet.addon.Fleet": 0}

# run.py --seen-cache: the soak judges each worker's RSS once this cache is full
if os.environ.get("SOAK_SEEN_CACHE"):
    SCHEDULER_SEEN_CACHE = int(os.environ["SOAK_SEEN_CACHE"])
