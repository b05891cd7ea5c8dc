"""The classic project's item."""

import scrapy


class PageItem(scrapy.Item):
    id = scrapy.Field()
    path = scrapy.Field()
