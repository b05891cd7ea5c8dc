"""Crawl jobs and schedules: start, watch, pause and stop crawls on the fleet (docs/jobs.md).

``timespec`` reads ``--cron`` and ``--every``; ``store`` holds job records and the agents'
registry in the hub's Redis (keys: ``crawlfleet.hub.fleetkeys.JobKeys``); ``control`` starts and
stops jobs through the agents; ``runners`` start crawler processes on a host (systemd units or
plain processes); ``agent`` is the per-host service; ``schedules`` the recurring jobs.
"""
