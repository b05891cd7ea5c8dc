"""Every setting of crawlfleet's worker components, declared once: name, default, meaning.

Scrapy keeps its defaults in ``scrapy/settings/default_settings.py``, scrapy-redis in
``defaults.py``; crawlfleet's are here, one section per component (the sections' order is the
reference page's). The components read a setting's default through :func:`default`, never a
literal of their own (``tests/unit/core/test_core_setting_table.py`` fails on one), validate the
value in their configuration class (one line naming the setting), and
``docs/reference/settings.md``'s tables are generated from the sections by
``scripts/gendocs.py`` (``make lint`` fails when the page and the table differ). ``values``
holds the typed reads (a flag, a number of seconds) whose errors name the setting.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Iterable
from typing import Any

from crawlfleet.settingtable.frontier import BLOOM, FRONTIER
from crawlfleet.settingtable.politeness import POLITENESS
from crawlfleet.settingtable.pools import ACCOUNTPOOL, PROXYPOOL
from crawlfleet.settingtable.rabbitmq import RABBITMQ
from crawlfleet.settingtable.row import Also, Setting
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


# Names that look like crawlfleet's (its prefixes): one a project sets that is no row of the table
# is a typo or another tool's setting, which the worker would otherwise ignore without a word.
LOOKS_OURS = re.compile(
    r"(?:SCHEDULER|REDIS|BLOOMFILTER|POLITENESS|PROXYPOOL|ACCOUNTPOOL|AUTHORIZATION|ITEMS"
    r"|WORKERSTATS|RABBITMQ|DUPEFILTER|FLEET)_[A-Z0-9_]+"
)
# scrapy-redis's and scrapy-redis-bloomfilter's settings crawlfleet does not read: what to use.
FOREIGN = {
    "SCHEDULER_DUPEFILTER_CLASS": "set DUPEFILTER_CLASS",
    "DUPEFILTER_KEY": "set SCHEDULER_DUPEFILTER_KEY (or BLOOMFILTER_KEY)",
    "REDIS_ITEMS_KEY": "set ITEMS_KEY",
    "REDIS_ITEMS_SERIALIZER": "items are stored as JSON fields of a stream (ITEMS_KEY)",
    "REDIS_START_URLS_KEY_DEFAULT": "set REDIS_START_URLS_KEY",
    "REDIS_ENCODING": "crawlfleet's clients decode what they read themselves",
    "REDIS_DECODE_RESPONSES": "crawlfleet's clients decode what they read themselves",
    "REDIS_CLS": "the client class follows REDIS_URL (Sentinel, Cluster)",
}


def unknown(names: Iterable[str], scrapys: Iterable[str] = ()) -> list[str]:
    """One line for each of ``names`` that looks like a crawlfleet setting but is none (nor one of
    Scrapy's own, ``scrapys``): what it probably meant, or what to use instead."""
    lines = []
    known = set(SETTINGS) | set(scrapys)
    for name in sorted(set(names)):
        if name in known or not LOOKS_OURS.fullmatch(name):
            continue
        if name in FOREIGN:
            lines.append(f"{name} is not read by crawlfleet: {FOREIGN[name]}")
            continue
        close = difflib.get_close_matches(name, SETTINGS, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        lines.append(f"{name} is no crawlfleet setting and is ignored{hint}")
    return lines


__all__ = [
    "SCRAPY_SETTINGS",
    "SECTIONS",
    "SETTINGS",
    "Also",
    "Setting",
    "default",
    "unknown",
]
