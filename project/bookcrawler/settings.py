"""Scrapy settings of the book crawl; deployment values come from the worker environment."""

BOT_NAME = "bookcrawler"
SPIDER_MODULES = ["bookcrawler.spiders"]
NEWSPIDER_MODULE = "bookcrawler.spiders"
ROBOTSTXT_OBEY = False
