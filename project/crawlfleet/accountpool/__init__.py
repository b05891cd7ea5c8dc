"""crawlfleet.accountpool."""
