"""The operators' read models, one per subject: what ``crawlfleet status``, the dashboard page,
its ``/metrics`` and the alerts read from the hub.

``crawl`` (one crawl: frontier, items, workers, series), ``bloom`` (its duplicate filter),
``politeness`` (the budget's keys and which limit binds), ``hub`` (round trip, CPU, memory,
jobs and agents), ``pools`` (the pools' sizes), ``series`` (the time series' decoding) and
``values`` (lenient reads of Redis replies); ``cluster.cluster_snapshot`` puts them together into
the one document every face shows, so they always agree. Worker-side code never imports a view.
"""
