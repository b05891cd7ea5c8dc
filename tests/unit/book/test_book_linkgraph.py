"""The demo site's plain HTML link graph (/pages/): fixed, fully reachable, and served."""

from __future__ import annotations

import re

from starlette.testclient import TestClient
from test_book_demosite import make_client

from crawlfleet.demosite import linkgraph


def test_every_page_is_reachable_from_the_entry_page() -> None:
    seen, todo = {0}, [0]
    while todo:
        for target in linkgraph.links(todo.pop()):
            assert 0 <= target < linkgraph.PAGES
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert len(seen) == linkgraph.PAGES


def test_links_are_distinct_and_never_to_the_page_itself() -> None:
    for page in range(linkgraph.PAGES):
        targets = linkgraph.links(page)
        assert page not in targets and len(targets) == len(set(targets)) >= 1


def test_the_site_serves_the_pages_without_login() -> None:
    client: TestClient = make_client()
    entry = client.get("/pages/")
    assert entry.status_code == 200 and 'href="/pages/0.html"' in entry.text
    page = client.get("/pages/7.html")
    assert page.status_code == 200 and "<h1>Page 7</h1>" in page.text
    hrefs = [int(n) for n in re.findall(r'href="/pages/(\d+)\.html"', page.text)]
    assert hrefs == linkgraph.links(7)
    for missing in (f"/pages/{linkgraph.PAGES}.html", "/pages/7.htm", "/pages/x.html"):
        assert client.get(missing).status_code == 404, missing
