"""scripts/gendocs.py: GitHub heading anchors, the link check, and the generated option tables."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from crawlfleet.settingtable import SECTIONS

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gendocs.py"


@pytest.fixture(scope="module")
def gendocs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gendocs", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Adding a worker", "adding-a-worker"),
        ("`crawlfleet export SPIDER -o FILE`", "crawlfleet-export-spider--o-file"),
        ("Demo site (`crawlfleet demosite`)", "demo-site-crawlfleet-demosite"),
        ('What "done" means', "what-done-means"),
        ("Proxy pool `/random`", "proxy-pool-random"),
    ],
)
def test_slug_is_githubs_anchor(gendocs: ModuleType, heading: str, anchor: str) -> None:
    assert gendocs.slug(heading) == anchor


def test_broken_links_name_page_line_and_target(gendocs: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "guide").mkdir()
    page = tmp_path / "guide" / "a.md"
    page.write_text("# A\n\n## Same\n\n## Same\n\n```\n[x](nowhere.md)\n```\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](guide/a.md#same-1) [web](https://example.net/x.md) `[code](gone.md)`\n"
        "[file](guide/missing.md) [heading](guide/a.md#other) [self](#a)\n"
    )
    pages = [readme, page]
    assert list(gendocs.broken_links(pages, root=tmp_path)) == [
        "README.md:2: link to a missing file: guide/missing.md",
        "README.md:2: link to a missing heading: guide/a.md#other",
        "README.md:2: link to a missing heading: #a",
    ]


def test_blocks_are_filled_and_unknown_blocks_refused(gendocs: ModuleType) -> None:
    text = "x\n<!-- BEGIN generated: m.T -->\nold\n<!-- END generated -->\ny\n"
    filled = gendocs.fill_blocks("p.md", text, {"m.T": "new\n"})
    assert filled == "x\n<!-- BEGIN generated: m.T -->\nnew\n<!-- END generated -->\ny\n"
    with pytest.raises(SystemExit, match=r"p\.md: generated block 'm\.T' has no source"):
        gendocs.fill_blocks("p.md", text, {})


def test_option_tables_show_every_option(gendocs: ModuleType) -> None:
    from crawlfleet.proxypool.config import OPTIONS

    table = gendocs.option_table("crawlfleet.proxypool.config", "OPTIONS")
    for option in OPTIONS:
        assert f"`{option.env}`" in table, option.env
    assert "| `--port` | `PROXYPOOL_PORT` | `5555` |" in table
    assert "| `--proxy` (repeatable) | `PROXYPOOL_PROXIES` | (unset) |" in table


def test_stale_references_in_code_and_roles(gendocs: ModuleType, tmp_path: Path) -> None:
    # Split so that the check does not find these references in this file itself.
    design, gone = "DESIGN" + ".md", "docs/" + "gone.md"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "deploy.md").write_text("# Deploy\n")
    (tmp_path / "roles" / "r" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "defaults" / "main.yml").write_text(
        f"# see docs/deploy.md\n# see {gone} and {design} §3\n# {design[:6]} §4\n"
    )
    outside = f"points to {design}, outside the repository; cite docs/"
    assert list(gendocs.stale_references(tmp_path)) == [
        f"roles/r/defaults/main.yml:2: {outside}",
        f"roles/r/defaults/main.yml:2: points to {gone}, which does not exist",
        f"roles/r/defaults/main.yml:3: {outside}",
    ]


def test_redis_keys_page_is_generated_from_the_keys_module(gendocs: ModuleType) -> None:
    from crawlfleet.hub.keydoc import KEYS

    name, page = "crawlfleet.hub.keydoc.KEYS", "docs/reference/redis-keys.md"
    assert {
        ("crawlfleet.hub.keydoc", "KEYS"): page,
        ("crawlfleet.hub.keydoc", "JOB_KEYS"): page,
    } == gendocs.KEY_BLOCKS
    table = gendocs.key_table("crawlfleet.hub.keydoc", "KEYS")
    for doc in KEYS:
        assert f"| `{doc.pattern()}` |" in table, doc.attribute
    assert (
        "| `<spider>:requests` | list / sorted set / hash | workers | `SCHEDULER_QUEUE_KEY` |"
        in table
    )
    assert "| `<spider>:leases:<worker>` | hash | workers | — |" in table
    jobs = gendocs.key_table("crawlfleet.hub.keydoc", "JOB_KEYS")
    assert "| `crawlfleet:job:<id>` | hash |" in jobs
    tables = {name: table, "crawlfleet.hub.keydoc.JOB_KEYS": jobs}
    text = (gendocs.ROOT / page).read_text()
    assert gendocs.fill_blocks(page, text, tables) == text, "run scripts/gendocs.py"
    drifted = text.replace("| `<spider>:seq` |", "| `<spider>:sequence` |")
    assert drifted != text
    assert gendocs.fill_blocks(page, drifted, tables) == text


def test_a_settings_section_renders_every_row_with_its_default(gendocs: ModuleType) -> None:
    table = gendocs.setting_table("crawlfleet.settingtable", "FRONTIER")
    lines = table.splitlines()
    assert lines[0] == "| setting | default | meaning |"
    assert len(lines) == 2 + len(SECTIONS["FRONTIER"])
    assert "| `SCHEDULER_PREFETCH` | `8` |" in table
    # a pipe inside a cell (the Cluster URL's `[:password@|user:password@]`) stays in its cell
    url_row = next(line for line in lines if line.startswith("| `REDIS_URL` |"))
    assert "[:password@\\|user:password@]" in url_row
    assert url_row.count(" | ") == 2
