"""A classic project's settings: the one fleet line is ADDONS (REDIS_URL: the environment)."""

BOT_NAME = "classic"
SPIDER_MODULES = ["classic.spiders"]
NEWSPIDER_MODULE = "classic.spiders"
ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 4
TELNETCONSOLE_ENABLED = False
RETRY_TIMES = 0
LOG_LEVEL = "INFO"

ADDONS = {"crawlfleet.addon.Fleet": 0}
