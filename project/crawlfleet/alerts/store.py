"""The alerts of a cluster view, with the rules' state kept in the hub's Redis.

``crawlfleet status`` and the dashboard both call :func:`current_alerts`: it reads the state
(``crawlfleet:alerts:state``), evaluates the rules and writes the state back, so a one-shot
``status`` sees the ban rates and the stuck jobs the dashboard has been watching. Two evaluators
at once: the last write wins, an observation may be lost, never counted twice.
"""

from __future__ import annotations

from typing import Any

import redis

from crawlfleet.alerts.rules import Alert, AlertState, evaluate
from crawlfleet.frontier.keys import JobKeys

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
