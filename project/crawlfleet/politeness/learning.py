"""What a politeness key has learned, read from its state hash: one decoder and one phase rule for
the budget, ``crawlfleet status``, the dashboard and ``/metrics``.

A key's hash (``SpiderKeys(namespace).politeness(key)``, written by ``lua/state.lua``) holds
numbers only; ``why`` is a code (:data:`WHY`). The phase says where the controller
(``crawlfleet.politeness.budget``) stands: ``growing`` (slow start: no ceiling seen; or back up
under one after a ban halved the rate), ``backing off`` (a ban or a slow-down moved the rate in
the last BACKING_OFF seconds), ``cooling down`` (the site's Retry-After or the pair's cool-down
holds the key), ``probing`` (a rate above the last clean one is being tried) or ``holding``
(just under the ceiling)."""

from __future__ import annotations

import math

# The state hash's fields, as lua/state.lua writes them.
FIELDS = (
    "tat",
    "rate",
    "cap",
    "cool",
    "window",
    "oks",
    "bans",
    "banned",
    "good",
    "bad",
    "probe",
    "gap",
    "lat",
    "latn",
    "base",
    "learned",
    "why",
    "pok",
    "pwin",
)
# lua/state.lua's WHY codes: what changed the rate last.
WHY = {0: "start", 1: "clean window", 2: "ban", 3: "slow-down", 4: "probe", 5: "hold"}
PHASES = ("growing", "backing off", "cooling down", "probing", "holding")
# A rate moved by a ban or a slow-down this recently (s) is backing off.
BACKING_OFF = 10.0
# A next slot further ahead than this (ms, beyond two intervals) is no lease's: a Retry-After.
HELD_MS = 1500.0
NEVER = -1e14  # the scripts write -1e15 for "never used / never banned"


class BadKeyState(ValueError):
    """A politeness state hash whose field is not a finite number (the message names both)."""


def decode(key: str, raw: dict[str, str]) -> dict[str, float]:
    """The known fields of a key's hash as numbers (absent ones are left out)."""
    fields: dict[str, float] = {}
    for name in FIELDS:
        if name not in raw:
            continue
        try:
            value = float(raw[name])
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise BadKeyState(f"politeness key {key!r}: field {name!r} = {str(raw[name])[:40]!r}")
        fields[name] = value
    return fields


def phase(fields: dict[str, float], now_ms: float) -> str:
    """Where the key's controller stands now (one of :data:`PHASES`)."""
    banned = fields.get("banned", NEVER)
    last = why(fields)
    if fields.get("cool", 0.0) > now_ms:
        return "cooling down"
    rate = fields.get("rate", 0.0)
    next_slot = fields.get("tat", NEVER) - now_ms
    recent = banned > NEVER and now_ms - banned < 60_000
    if recent and rate > 0 and next_slot > HELD_MS + 2000 / rate:
        return "cooling down"  # the site's Retry-After pushed the key's next slot out
    learned = fields.get("learned", 0.0)
    if last in ("ban", "slow-down") and now_ms - learned < BACKING_OFF * 1000:
        return "backing off"
    if fields.get("bad", 0.0) <= 0 or last == "clean window":
        return "growing"  # slow start, or back up under a ceiling after a halving
    if last == "probe":
        return "probing"
    return "holding"


def why(fields: dict[str, float]) -> str:
    """What changed the key's rate last, in words."""
    return WHY.get(int(fields.get("why", 0)), "start")
