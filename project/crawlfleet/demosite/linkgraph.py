"""Plain HTML pages with links: the demo site's link graph for classic ``CrawlSpider`` projects.

``GET /pages/`` is the entry page, ``GET /pages/<n>.html`` (``0 <= n < PAGES``) one page with a
``<h1>`` title and links to three other pages. The graph is fixed (no seed, no state): page ``n``
links to ``n + 1``, ``7n + 3`` and ``13n + 5`` (mod ``PAGES``), so every page is reachable from the
entry page and a crawl that follows links collects exactly ``PAGES`` pages. The pages are neither
rate-limited nor behind the login: they are the lab's second, independent target.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

PAGES = 240


def links(page: int) -> list[int]:
    """The pages that page ``page`` links to, in document order (distinct, without itself)."""
    found: list[int] = []
    for target in ((page + 1) % PAGES, (7 * page + 3) % PAGES, (13 * page + 5) % PAGES):
        if target != page and target not in found:
            found.append(target)
    return found


def title(page: int) -> str:
    return f"Page {page}"


def _html(heading: str, targets: list[int]) -> str:
    anchors = "".join(f'<li><a href="/pages/{t}.html">{title(t)}</a></li>' for t in targets)
    return (
        f"<!doctype html><html><head><title>{heading}</title></head>"
        f"<body><h1>{heading}</h1><ul>{anchors}</ul></body></html>"
    )


async def index(request: Request) -> Response:
    """The entry page: a link to page 0."""
    return HTMLResponse(_html("Pages", [0]))


async def page(request: Request) -> Response:
    """``/pages/<n>.html``: 404 unless ``n`` is a page number of the graph."""
    name = str(request.path_params["name"])
    number = name.removesuffix(".html")
    if not (name.endswith(".html") and number.isdigit() and int(number) < PAGES):
        return HTMLResponse("<h1>not found</h1>", status_code=404)
    return HTMLResponse(_html(title(int(number)), links(int(number))))
