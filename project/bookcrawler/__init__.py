"""The book crawl: a Scrapy project that runs on crawlfleet workers."""
