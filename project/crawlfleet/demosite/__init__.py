"""crawlfleet.demosite."""
