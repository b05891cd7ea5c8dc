"""Generate the reference tables in docs/ from their single sources, and check the docs.

Generated: ``docs/reference/roles.md`` (one table per role, from ``roles/*/meta/argument_specs.yml``
with the defaults of ``roles/*/defaults/main.yml``), the option tables of the hub services, the
tables of the worker components' settings (``crawlfleet.settingtable``, one per section) and the
table of a crawl's Redis keys (``crawlfleet.hub.keydoc.KEYS``), each written between
``<!-- BEGIN generated: <module>.<attribute> -->`` and ``<!-- END generated -->`` in the page that
documents it (``BLOCKS`` and ``KEY_BLOCKS`` below).

``--check`` writes nothing: it prints one line per generated file that differs from what would be
generated, one line per relative link in README.md and docs/**/*.md whose file (or heading
anchor) does not exist, and one line per comment or description in code, roles and tests that
cites a docs/ file that does not exist or the design notes outside the repository; it exits 1 if
it printed anything. Without ``--check`` it writes the generated files, then checks the rest.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

SELF = Path(__file__).resolve()
ROOT = SELF.parent.parent

ROLES_PAGE = "docs/reference/roles.md"
# (module, attribute) of an option table -> the page holding its generated block.
BLOCKS: dict[tuple[str, str], str] = {
    ("crawlfleet.proxypool.config", "OPTIONS"): "docs/proxypool.md",
    ("crawlfleet.accountpool.config", "OPTIONS"): "docs/accountpool.md",
    ("crawlfleet.dashboard.config", "OPTIONS"): "docs/dashboard.md",
    ("crawlfleet.demosite.cli", "OPTIONS"): "docs/book.md",
    ("crawlfleet.jobs.agent", "OPTIONS"): "docs/jobs.md",
}
# Sections of the worker components' settings table -> the page holding their generated blocks.
SETTINGS_PAGE = "docs/reference/settings.md"
SETTING_BLOCKS: dict[tuple[str, str], str] = {
    ("crawlfleet.settingtable", section): SETTINGS_PAGE
    for section in (
        "FRONTIER",
        "BLOOM",
        "ADDON",
        "PROXYPOOL",
        "ACCOUNTPOOL",
        "ITEMS",
        "WORKERSTATS",
        "RABBITMQ",
        "POLITENESS",
    )
}
# (module, attribute) of a table of Redis keys -> the page holding its generated block.
KEY_BLOCKS: dict[tuple[str, str], str] = {
    ("crawlfleet.hub.keydoc", "KEYS"): "docs/reference/redis-keys.md",
    ("crawlfleet.hub.keydoc", "JOB_KEYS"): "docs/reference/redis-keys.md",
}
BLOCK = re.compile(
    r"(<!-- BEGIN generated: (?P<name>[\w.]+) -->\n)(?P<body>.*?)(<!-- END generated -->)", re.S
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
# Where comments and descriptions may cite docs/ pages (checked by stale_references).
SOURCE_DIRS = ("project", "roles", "scripts", "ansible", "tests", "inventory", "lab")
SOURCE_SUFFIXES = {".py", ".yml", ".yaml", ".j2", ".sh", ".cfg", ".toml", ".md", ".ini", ""}
DOC_REF = re.compile(r"\bdocs/[\w./-]*\w\.(?:md|png)\b")
OUTSIDE = re.compile(r"\bDESIGN(?:\.md\b|\s*§)")


# ---- rendering helpers


def cell(text: str) -> str:
    """``text`` fit for one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def prose(text: str) -> str:
    """``text`` as a table cell of prose: ``<name>`` placeholders shown, not taken for HTML."""
    parts = re.split(r"(`[^`]*`)", cell(text))
    return "".join(
        part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;")
        for part in parts
    )


def code(value: str) -> str:
    """``value`` as inline code inside a table cell."""
    value = cell(value)
    fence = "``" if "`" in value else "`"
    pad = " " if "`" in value else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def yaml_value(value: Any) -> str:
    """A role default as it would be written in YAML flow style."""
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    dumped: str = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False)
    return dumped.strip().removesuffix("...").strip()


# ---- docs/reference/roles.md


def role_sections() -> Iterator[str]:
    for spec_file in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        specs = yaml.safe_load(spec_file.read_text()).get("argument_specs") or {}
        defaults_file = spec_file.parent.parent / "defaults" / "main.yml"
        defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else None
        defaults = defaults or {}
        for entry, spec in specs.items():
            title = role if entry == "main" else f"{role} (tasks_from: {entry})"
            lines = [f"## {title}", ""]
            if spec.get("short_description"):
                lines += [prose(str(spec["short_description"])) + ".", ""]
            description = spec.get("description") or []
            if isinstance(description, str):
                description = [description]
            for part in description:
                lines += [prose(str(part)), ""]
            options = spec.get("options") or {}
            if not options:
                lines += ["No variables.", ""]
                yield "\n".join(lines)
                continue
            lines += ["| variable | type | default | description |", "|---|---|---|---|"]
            for name, option in options.items():
                kind = str(option.get("type", "str"))
                if option.get("elements"):
                    kind += f" of {option['elements']}"
                if name in defaults:
                    default = code(yaml_value(defaults[name]))
                elif option.get("required"):
                    default = "(required)"
                else:
                    default = "—"
                text = option.get("description") or ""
                if isinstance(text, list):
                    text = " ".join(str(part) for part in text)
                if option.get("choices"):
                    text += " One of: " + ", ".join(f"`{c}`" for c in option["choices"]) + "."
                lines.append(f"| `{name}` | {cell(kind)} | {default} | {prose(str(text))} |")
            lines.append("")
            yield "\n".join(lines)


def roles_page() -> str:
    head = (
        "# Role variables\n\n"
        "<!-- generated by scripts/gendocs.py from roles/*/meta/argument_specs.yml and "
        "roles/*/defaults/main.yml; do not edit -->\n\n"
        "Every public variable of every role: its type, its default (from the role's "
        "`defaults/main.yml`; `—` when the role computes it) and what it means. How to deploy: "
        "[deploy.md](../deploy.md).\n"
    )
    return head + "\n" + "\n".join(role_sections())


# ---- option tables of the services


def option_table(module_name: str, attribute: str) -> str:
    """The table of a service's ``crawlfleet.service.options.Option`` tuple."""
    from crawlfleet.service.options import default_text

    options = getattr(importlib.import_module(module_name), attribute)
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for option in options:
        if option.secret:
            shown_flag = "— (a secret: environment or file only, never a flag)"
        elif option.flag is None:
            shown_flag = "— (environment only)"
        else:
            shown_flag = " or ".join(f"`{flag}`" for flag in (option.flag, *option.aliases))
            if option.kind == "list":
                shown_flag += " (repeatable)"
        env = " or ".join(f"`{env}`" for env in (option.env, *option.env_aliases))
        shown = default_text(option)
        default = code(shown) if shown else "(unset)"
        rows.append(f"| {shown_flag} | {env} | {default} | {prose(option.help)} |")
    return "\n".join(rows) + "\n"


# ---- the worker components' settings


def setting_default(row: Any, declared: dict[str, Any]) -> str:
    """The default column of a row of the settings table: its own words, else the value of the
    setting as declared (an ``Also`` row's in its own section)."""
    if row.shown:
        return cell(row.shown)
    if row.name not in declared:
        return "—"  # one of Scrapy's own settings
    value = declared[row.name].default
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, str):
        return code(value)
    if isinstance(value, bool | int | float):
        return code(repr(value))
    return code(json.dumps(list(value) if isinstance(value, tuple) else value))


def setting_table(module_name: str, attribute: str) -> str:
    """The table of one section of ``crawlfleet.settingtable``."""
    module = importlib.import_module(module_name)
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for row in module.SECTIONS[attribute]:
        default = setting_default(row, module.SETTINGS)
        rows.append(f"| `{row.name}` | {default} | {cell(row.doc)} |")
    return "\n".join(rows) + "\n"


# ---- Redis keys


def key_table(module_name: str, attribute: str) -> str:
    """The table of keys ``module.attribute`` documents (``crawlfleet.hub.keydoc.KeyDoc``)."""
    rows = [
        "| key | type | written by | renamed by | content |",
        "|---|---|---|---|---|",
    ]
    for doc in getattr(importlib.import_module(module_name), attribute):
        setting = f"`{doc.setting.setting}`" if doc.setting else "—"
        rows.append(
            f"| {code(doc.pattern())} | {cell(doc.kind)} | {prose(doc.writer)} | {setting} "
            f"| {prose(doc.meaning)} |"
        )
    return "\n".join(rows) + "\n"


def fill_blocks(path: str, text: str, tables: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in tables:
            raise SystemExit(
                f"{path}: generated block {name!r} has no source in scripts/gendocs.py"
            )
        return match[1] + tables[name] + match[4]

    return BLOCK.sub(replace, text)


def generated() -> dict[str, str]:
    """Every generated file's path (relative to the repository) and its expected content."""
    out = {ROLES_PAGE: roles_page()}
    by_page: dict[str, dict[str, str]] = {}
    sources = [(source, page, option_table) for source, page in BLOCKS.items()]
    sources += [(source, page, setting_table) for source, page in SETTING_BLOCKS.items()]
    sources += [(source, page, key_table) for source, page in KEY_BLOCKS.items()]
    for (module_name, attribute), page, render in sources:
        by_page.setdefault(page, {})[f"{module_name}.{attribute}"] = render(module_name, attribute)
    for page, tables in by_page.items():
        text = (ROOT / page).read_text()
        found = {m["name"] for m in BLOCK.finditer(text)}
        for name in tables.keys() - found:
            raise SystemExit(f"{page}: no '<!-- BEGIN generated: {name} -->' block")
        out[page] = fill_blocks(page, text, tables)
    return out


# ---- links


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fence = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.*)", line)):
            base = slug(m[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(pages: Iterable[Path], root: Path = ROOT) -> Iterator[str]:
    cache: dict[Path, set[str]] = {}
    for page in pages:
        fence = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if FENCE.match(line):
                fence = not fence
                continue
            if fence:
                continue
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(root)}:{number}"
                if not dest.exists():
                    yield f"{where}: link to a missing file: {target}"
                elif anchor and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        yield f"{where}: link to a missing heading: {target}"


def stale_references(root: Path = ROOT) -> Iterator[str]:
    """Comments and descriptions in code, roles and tests that point to a docs page that does
    not exist, or to the design notes outside the repository."""
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file() or path == SELF:
                continue
            if any(part.startswith(".") or part == "__pycache__" for part in path.parts):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                where = f"{path.relative_to(root)}:{number}"
                if OUTSIDE.search(line):
                    yield f"{where}: points to DESIGN.md, outside the repository; cite docs/"
                for target in DOC_REF.findall(line):
                    if not (root / target).exists():
                        yield f"{where}: points to {target}, which does not exist"


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if docs drifted"
    )
    args = parser.parse_args(argv)
    problems = []
    for rel, content in generated().items():
        path = ROOT / rel
        current = path.read_text() if path.exists() else None
        if current == content:
            continue
        if args.check:
            problems.append(f"{rel}: differs from what scripts/gendocs.py generates; run it")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            print(f"wrote {rel}")
    problems += broken_links(doc_pages())
    problems += stale_references()
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
