"""Alerts of the fleet: the events an operator must act on, in one place.

``rules`` evaluates them (pure functions over the cluster view of ``crawlfleet.views`` and
a small state that remembers since when); ``store`` keeps that state in the hub's Redis so that
``crawlfleet status`` and the dashboard see the same alerts; ``webhook`` posts firing and resolved
alerts from the dashboard. ``prometheus-rules.yml`` (package data) is the same alerts as
Prometheus rules over the dashboard's ``/metrics``. docs/alerts.md says what each means.
"""
