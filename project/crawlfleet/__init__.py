"""crawlfleet: the Redis side of a Scrapy crawl cluster, its pools and its operator tools."""

__version__ = "0.1.0"
