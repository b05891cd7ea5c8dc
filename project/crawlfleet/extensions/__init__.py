"""Scrapy extensions of crawlfleet (enabled per worker through ``EXTENSIONS``)."""
