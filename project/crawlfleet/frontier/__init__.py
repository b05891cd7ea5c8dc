"""crawlfleet.frontier."""
