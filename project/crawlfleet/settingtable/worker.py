"""The settings of the Fleet add-on, the items pipeline and the WorkerStats extension."""

from __future__ import annotations

from crawlfleet.hub.keys import ITEMS_KEY
from crawlfleet.settingtable.row import Also, Setting

ADDON = (
    Setting(
        "FLEET_ENVIRONMENT_WINS",
        False,
        "the worker environment overrides the project's own connection settings",
        shown="`False` (`True` under `crawlfleet.fleetsettings`)",
    ),
)

ITEMS = (
    Also(
        "REDIS_URL",
        (
            "the hub's Redis (with the frontier's `REDIS_PARAMS`); unset: the pipeline is disabled"
            " (`NotConfigured`)"
        ),
        shown="—",
    ),
    Setting(
        "ITEMS_KEY",
        ITEMS_KEY.default,
        "stream key",
    ),
    Setting(
        "ITEMS_ID_FIELD",
        "id",
        "item field stored as the entry's `id` (used by export to de-duplicate)",
    ),
    Setting(
        "ITEMS_BATCH_SIZE",
        100,
        "items per `XADD` round trip",
    ),
    Setting(
        "ITEMS_FLUSH_INTERVAL",
        0.1,
        "seconds before a partial batch is written",
    ),
    Setting(
        "ITEMS_MAXLEN",
        0,
        "approximate maximum stream length (`XADD MAXLEN ~`)",
        shown="`0` (no trim)",
    ),
)

WORKERSTATS = (
    Setting(
        "WORKERSTATS_ENABLED",
        True,
        "switch it off without editing `EXTENSIONS`",
    ),
    Setting(
        "WORKERSTATS_INTERVAL",
        10,
        "seconds between samples (one Lua call each)",
    ),
    Setting(
        "WORKERSTATS_HISTORY",
        3600,
        "seconds of samples kept per worker",
    ),
)
