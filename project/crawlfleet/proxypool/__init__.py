"""crawlfleet.proxypool."""
