"""`crawlfleet dashboard`: the operators' live page, JSON status API and Prometheus metrics."""
