"""Follow every link of the site's /pages/ graph and yield one item per page (a classic CrawlSpider)."""

import inflection
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

from linkcrawler.items import PageItem


class PagesSpider(CrawlSpider):
    name = "pages"

    rules = (Rule(LinkExtractor(allow=r"/pages/\d+\.html$"), callback="parse_item", follow=True),)

    async def start(self):
        # The site to crawl comes from the settings (LINKCRAWLER_START_URL in the environment).
        self.start_urls = [self.settings.get("LINKCRAWLER_START_URL")]
        async for request in super().start():
            yield request

    def parse_item(self, response):
        title = response.css("h1::text").get()
        yield PageItem(url=response.url, title=title, slug=inflection.parameterize(title))
