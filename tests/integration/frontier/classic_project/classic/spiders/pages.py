"""A spider written the way the Scrapy tutorial teaches: start_requests(), callbacks, items."""

from urllib.parse import urlsplit

import scrapy

from classic.items import PageItem


class PagesSpider(scrapy.Spider):
    name = "pages"

    def __init__(self, site: str = "", pages: str = "0", **kwargs):
        super().__init__(**kwargs)
        self.site = site
        self.pages = int(pages)

    def start_requests(self):
        for i in range(self.pages):
            yield scrapy.Request(f"{self.site}/p/{i}", callback=self.parse_page)

    def parse_page(self, response):
        path = urlsplit(response.url).path
        yield PageItem(id=path, path=path)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_page)
