"""Downloader middlewares that make every request go through the hub's pools.

``ProxyMiddleware`` picks a proxy from the proxy pool, ``AuthorizationMiddleware`` adds a token
from the account pool. Enable both (before Scrapy's HttpProxyMiddleware at 750)::

    DOWNLOADER_MIDDLEWARES = {
        "crawlfleet.middlewares.ProxyMiddleware": 740,
        "crawlfleet.middlewares.AuthorizationMiddleware": 745,
    }
"""

from crawlfleet.middlewares.auth import AuthorizationMiddleware
from crawlfleet.middlewares.proxy import ProxyMiddleware

__all__ = ["AuthorizationMiddleware", "ProxyMiddleware"]
