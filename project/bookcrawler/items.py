"""Items of the book crawl: ``BookItem`` has the detail fields of the book's target API."""

from __future__ import annotations

import scrapy


class BookItem(scrapy.Item):
    id = scrapy.Field()
    name = scrapy.Field()
    authors = scrapy.Field()
    translators = scrapy.Field()
    publisher = scrapy.Field()
    published_at = scrapy.Field()
    isbn = scrapy.Field()
    price = scrapy.Field()
    page_number = scrapy.Field()
    score = scrapy.Field()
    tags = scrapy.Field()
    cover = scrapy.Field()
    catalog = scrapy.Field()
    introduction = scrapy.Field()
    comments = scrapy.Field()
