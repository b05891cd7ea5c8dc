"""One result row of a benchmark, in the shape tests/bench/run.py collects (its ``Row``).

A bench module names its section once (``row = Section("…").row``) and builds every row with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Section:
    """The section of the results table a bench module writes its rows under."""

    name: str

    def row(
        self, scenario: str, metric: str, value: float, unit: str, note: str = ""
    ) -> dict[str, Any]:
        return {
            "section": self.name,
            "scenario": scenario,
            "metric": metric,
            "value": float(value),
            "unit": unit,
            "note": note,
        }
