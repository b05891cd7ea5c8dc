"""crawlfleet.middlewares."""
