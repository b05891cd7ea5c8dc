"""The demo site's book catalogue: deterministic from a seed, built lazily one book at a time.

The same ``(size, seed)`` always gives the same ids, the same order and the same fields, so a
test can compute what a complete crawl must have exported.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_WORDS = _words(
    "river night garden city silence empire letters winter shadow light ocean stone memory road "
    "fire glass mountain island clock wind forest mirror harbour storm dream history bridge song "
    "kingdom paper orchard valley lantern archive machine"
)
_SURNAMES = _words("Li Wang Zhang Liu Chen Yang Zhao Huang Zhou Wu Smith Garcia Müller Rossi Sato")
_GIVEN = _words("Wei Fang Min Jing Lei Hua Anna Marco Yuki Elena Tom Sofia Ivan Mei Jun")
_PUBLISHERS = (
    "Harbour Press",
    "Lantern Books",
    "Orchard House",
    "Northwind Publishing",
    "Stone Bridge Editions",
    "Crawl & Co.",
)
_TAGS = _words("novel history science essay poetry classic travel biography fantasy crime")


def _title(rng: random.Random) -> str:
    words = rng.sample(_WORDS, rng.randint(1, 3))
    return "The " + " ".join(w.capitalize() for w in words)


def _person(rng: random.Random) -> str:
    return f"{rng.choice(_GIVEN)} {rng.choice(_SURNAMES)}"


class Catalogue:
    """``size`` books with distinct 7-digit string ids in a fixed order; ``seed`` picks them."""

    def __init__(self, size: int, seed: int) -> None:
        if size < 0:
            raise ValueError(f"catalogue size must be >= 0, got {size}")
        self.size = size
        self.seed = seed
        rng = random.Random(f"catalogue:{seed}")
        self.ids: list[str] = [str(n) for n in rng.sample(range(1_000_000, 10_000_000), size)]
        self._index = {book_id: i for i, book_id in enumerate(self.ids)}
        # Details are derived on demand; the cache keeps hot ones without building all 9,216.
        self.book = lru_cache(maxsize=4096)(self._build)

    def __len__(self) -> int:
        return self.size

    def __contains__(self, book_id: object) -> bool:
        return book_id in self._index

    def page(self, offset: int, limit: int) -> list[dict[str, Any]]:
        """The list view of ``ids[offset:offset+limit]``: summary fields only, as the book's API."""
        return [self.summary(book_id) for book_id in self.ids[offset : offset + limit]]

    def summary(self, book_id: str) -> dict[str, Any]:
        full = self.book(book_id)
        return {k: full[k] for k in ("id", "name", "authors", "cover", "score")}

    def _build(self, book_id: str) -> dict[str, Any]:
        if book_id not in self._index:
            raise KeyError(book_id)
        rng = random.Random(f"book:{self.seed}:{book_id}")
        n_chapters = rng.randint(3, 8)
        return {
            "id": book_id,
            "name": _title(rng),
            "authors": [_person(rng) for _ in range(rng.randint(1, 2))],
            "translators": [_person(rng) for _ in range(rng.randint(0, 1))],
            "publisher": rng.choice(_PUBLISHERS),
            "published_at": f"{rng.randint(1950, 2024)}-{rng.randint(1, 12):02d}-01",
            "isbn": "978" + "".join(str(rng.randint(0, 9)) for _ in range(10)),
            "price": f"{rng.randint(900, 19900) / 100:.2f}",
            "page_number": rng.randint(80, 1200),
            "score": f"{rng.randint(50, 100) / 10:.1f}",
            "tags": sorted(rng.sample(_TAGS, rng.randint(1, 3))),
            "cover": f"/static/covers/{book_id}.jpg",
            "catalog": "\n".join(f"Chapter {i + 1}. {_title(rng)}" for i in range(n_chapters)),
            "introduction": " ".join(rng.choice(_WORDS) for _ in range(40)).capitalize() + ".",
            "comments": [
                {"id": f"{book_id}-{i}", "content": " ".join(rng.sample(_WORDS, 6))}
                for i in range(rng.randint(0, 3))
            ],
        }
