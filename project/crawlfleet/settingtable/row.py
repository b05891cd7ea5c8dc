"""The rows of the settings table: a :class:`Setting` is declared once, in the section that owns
it; an :class:`Also` lists it again in another section's table, with what it means there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One Scrapy setting a crawlfleet component reads.

    ``default`` is the value the code uses when the setting is unset (``None``: there is none, or
    it is computed from other settings, which ``shown`` then says in words); ``doc`` is its row's
    meaning in ``docs/reference/settings.md`` (Markdown, one table cell)."""

    name: str
    default: Any
    doc: str
    shown: str = ""


@dataclass(frozen=True)
class Also:
    """A setting declared in another section (or Scrapy's own), listed again where it matters too:
    ``doc`` is what it means here; ``shown`` the default, when the declared one would mislead."""

    name: str
    doc: str
    shown: str = ""
