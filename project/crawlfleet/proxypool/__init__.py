"""The proxy pool service: scored proxies in Redis, fetched, tested and served over HTTP."""
