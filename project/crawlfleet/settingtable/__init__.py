"""Every setting of crawlfleet's worker components, declared once: name, default, meaning.

Scrapy keeps its defaults in ``scrapy/settings/default_settings.py``, scrapy-redis in
``defaults.py``; crawlfleet's are here, one section per component (the sections' order is the
reference page's). The components read a setting's default through :func:`default`, never a
literal of their own (``tests/unit/core/test_core_setting_table.py`` fails on one), validate the
value in their configuration class (one line naming the setting), and
``docs/reference/settings.md``'s tables are generated from the sections by
``scripts/gendocs.py`` (``make lint`` fails when the page and the table differ).
"""

from __future__ import annotations

import copy
from typing import Any

from crawlfleet.settingtable.frontier import BLOOM, FRONTIER
from crawlfleet.settingtable.politeness import POLITENESS
from crawlfleet.settingtable.pools import ACCOUNTPOOL, PROXYPOOL
from crawlfleet.settingtable.rabbitmq import RABBITMQ
from crawlfleet.settingtable.row import Also, Setting, default_text
from crawlfleet.settingtable.worker import ADDON, ITEMS, WORKERSTATS

SECTIONS: dict[str, tuple[Setting | Also, ...]] = {
    "FRONTIER": FRONTIER,
    "BLOOM": BLOOM,
    "ADDON": ADDON,
    "PROXYPOOL": PROXYPOOL,
    "ACCOUNTPOOL": ACCOUNTPOOL,
    "ITEMS": ITEMS,
    "WORKERSTATS": WORKERSTATS,
    "RABBITMQ": RABBITMQ,
    "POLITENESS": POLITENESS,
}
# Scrapy's own settings a section lists again (what they also mean to crawlfleet).
SCRAPY_SETTINGS = frozenset({"CONCURRENT_REQUESTS"})

SETTINGS: dict[str, Setting] = {
    row.name: row for rows in SECTIONS.values() for row in rows if isinstance(row, Setting)
}


def default(name: str) -> Any:
    """The default of setting ``name`` (a copy: a caller may change it)."""
    try:
        return copy.deepcopy(SETTINGS[name].default)
    except KeyError:
        raise KeyError(f"{name} is not a setting of crawlfleet.settingtable") from None


def shown_default(row: Setting | Also) -> str:
    """The default column of ``row`` in the reference page."""
    if row.shown:
        return row.shown
    declared = SETTINGS.get(row.name)
    return default_text(declared.default) if declared else "—"


__all__ = ["SCRAPY_SETTINGS", "SECTIONS", "SETTINGS", "Also", "Setting", "default", "shown_default"]
