"""The alerts of a cluster view, with the rules' state kept in the hub's Redis.

``crawlfleet status`` and the dashboard both call :func:`current_alerts`: it reads the state
(``crawlfleet:alerts:state``), evaluates the rules and writes the state back, so a one-shot
``status`` sees the ban rates and the stuck jobs the dashboard has been watching. Two evaluators
at once: the last write wins, an observation may be lost, never counted twice.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import redis

from crawlfleet.alerts.rules import Alert, AlertState, evaluate
from crawlfleet.hub.fleetkeys import JobKeys

STATE_TTL_MS = 86_400_000


def load_state(client: redis.Redis) -> AlertState | None:
    """The stored state (a fresh one when there is none or it is unreadable); None when Redis
    refuses to read it (an ACL) or the key is of another type."""
    try:
        raw = client.get(JobKeys.for_client(client).alerts_state)
    except redis.ResponseError:
        return None
    return AlertState.from_json(raw if isinstance(raw, bytes | str) else None)


def save_state(client: redis.Redis, state: AlertState) -> bool:
    """Store ``state`` (a day's expiry); False when Redis refuses the write (an ACL)."""
    try:
        client.set(JobKeys.for_client(client).alerts_state, state.to_json(), px=STATE_TTL_MS)
    except redis.ResponseError:
        return False
    return True


def webhook_id(url: str) -> str:
    """Which receiver a record of sent notifications is about (a digest: the URL may hold a
    token)."""
    return hashlib.sha256(url.encode()).hexdigest()


def load_notified(client: redis.Redis, webhook: str) -> dict[str, dict[str, Any]]:
    """What the receiver ``webhook`` (:func:`webhook_id`) was last told is firing (alert key →
    the alert's JSON); empty when nothing is stored for it or the record is unreadable. Raises
    ``redis.RedisError``."""
    raw = client.get(JobKeys.for_client(client).alerts_notified)
    try:
        stored = json.loads(raw) if isinstance(raw, bytes | str) else {}
    except ValueError:
        return {}
    if not isinstance(stored, dict) or stored.get("webhook") != webhook:
        return {}  # another receiver (the URL changed) was never told anything
    alerts = stored.get("alerts")
    if not isinstance(alerts, dict):
        return {}
    return {
        str(key): alert
        for key, alert in alerts.items()
        if isinstance(alert, dict) and alert.get("key") == key
    }


def save_notified(client: redis.Redis, webhook: str, notified: dict[str, dict[str, Any]]) -> None:
    """Store what the receiver ``webhook`` was told is firing (a day's expiry). Raises
    ``redis.RedisError``."""
    record = {"webhook": webhook, "alerts": notified}
    client.set(
        JobKeys.for_client(client).alerts_notified,
        json.dumps(record, sort_keys=True),
        px=STATE_TTL_MS,
    )


def current_alerts(
    client: redis.Redis,
    view: dict[str, Any],
    now: float | None = None,
    *,
    save: bool = True,
    local: AlertState | None = None,
) -> list[Alert]:
    """The active alerts of ``view`` (a snapshot with ``hub``); the stored state is updated
    unless ``save`` is false (a view of some spiders only would forget the others').

    ``local`` is a long-running caller's own state (the dashboard's), used and updated instead
    where Redis refuses the stored one.
    """
    stored = load_state(client)
    state = stored if stored is not None else (local if local is not None else AlertState())
    alerts = evaluate(view, state, now)
    if save:
        save_state(client, state)
    return alerts
