"""The package's floors: ``crawlfleet.hub`` stands on nothing of crawlfleet's, the stores of the
pools, jobs, alerts and the ACL do not reach into the crawl queue for key names, no import runs
in a circle, none hides inside a function, and no module (600 lines) or function (80) outgrows
one reading.

Imports are read from the source (``ast``), every one of them: at module level, under
``TYPE_CHECKING`` and inside functions alike, so a cycle cannot be hidden by moving an import
into a function. Each check is shown catching a planted fault first.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.packages import WORKER_SIDE

PACKAGE = Path(__file__).resolve().parents[3] / "project" / "crawlfleet"

# Modules that share no crawl's logic: they name the hub's keys through crawlfleet.hub only.
NOT_THE_CRAWL_QUEUE = (
    "crawlfleet.hub",
    "crawlfleet.proxypool",
    "crawlfleet.accountpool",
    "crawlfleet.alerts",
    "crawlfleet.jobs.store",
    "crawlfleet.politeness",
    "crawlfleet.service",
    "crawlfleet.extensions",
    "crawlfleet.pipelines",
    "crawlfleet.middlewares",
)

# The sizes a newcomer can read at once (issue 36): a module, a function.
MODULE_LINES = 600
FUNCTION_LINES = 80


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    name = ".".join(parts)
    return name.removesuffix(".__init__")


def imports(path: Path, root: Path) -> Iterator[tuple[str, int, bool]]:
    """Every ``(module, line, at_top)`` that ``path`` imports from the package under ``root``;
    ``from pkg import sub`` counts as importing ``pkg.sub`` when ``sub`` is a module."""
    top = root.name
    tree = ast.parse(path.read_text(encoding="utf-8"))
    at_top = {id(node) for node in tree.body}
    at_top |= {
        id(child)
        for node in tree.body
        if isinstance(node, ast.If)  # if TYPE_CHECKING: … (still a module-level import)
        for child in node.body
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = []
            for alias in node.names:
                sub = root.parent / (node.module + "." + alias.name).replace(".", "/")
                is_module = sub.with_suffix(".py").exists() or (sub / "__init__.py").exists()
                names.append(f"{node.module}.{alias.name}" if is_module else node.module)
        else:
            continue
        for name in names:
            if name == top or name.startswith(top + "."):
                yield name, node.lineno, id(node) in at_top


def graph(root: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports (anywhere in its source)."""
    edges: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        edges[name] = {target for target, _, _ in imports(path, root) if target != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def upward(root: Path, floor: str) -> list[str]:
    """Imports from ``floor``'s modules of anything of the package outside ``floor``."""
    return [
        f"{module_name(path, root)}:{line} imports {target}"
        for path in sorted(root.rglob("*.py"))
        if within(module_name(path, root), floor)
        for target, line, _ in imports(path, root)
        if not within(target, floor)
    ]


def into(root: Path, sources: tuple[str, ...], target: str) -> list[str]:
    """Imports of ``target`` (a package) from any module under ``sources``."""
    return [
        f"{module_name(path, root)}:{line} imports {name}"
        for path in sorted(root.rglob("*.py"))
        if any(within(module_name(path, root), s) for s in sources)
        for name, line, _ in imports(path, root)
        if within(name, target)
    ]


def hidden(root: Path) -> list[str]:
    """Imports of the package made inside a function or class rather than at the top."""
    return [
        f"{module_name(path, root)}:{line} imports {target} inside a function"
        for path in sorted(root.rglob("*.py"))
        for target, line, at_top in imports(path, root)
        if not at_top
    ]


def inline_lua(root: Path) -> list[str]:
    """String constants of more than one line that hold Lua sent to Redis (``redis.call``)."""
    return [
        f"{module_name(path, root)}:{node.lineno} holds a Lua script"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "redis.call" in node.value
        and node.value.strip().count("\n") > 0
    ]


# -- the checks, each first catching a planted fault ---------------------------------------------


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "crawlfleet"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for directory in [p for p in root.rglob("*") if p.is_dir()]:
        (directory / "__init__.py").touch()
    return root


def test_the_checks_catch_planted_faults(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "hub/keys.py": "import redis\nfrom crawlfleet.hub import urls\n",
            "hub/urls.py": "def f():\n    from crawlfleet.frontier import config\n",
            "frontier/config.py": "from crawlfleet.politeness.budget import x\n",
            "politeness/budget.py": "from crawlfleet.frontier import config\nx = 1\n",
            "proxypool/store.py": "from crawlfleet.frontier.config import KEYS\n",
            "proxypool/api.py": (
                'ONE = "redis.call(\'GET\', KEYS[1])"\nTWO = """\nredis.call(1)\nreturn 0\n"""\n'
            ),
        },
    )
    assert upward(root, "crawlfleet.hub") == [
        "crawlfleet.hub.urls:2 imports crawlfleet.frontier.config"
    ]
    assert cycles(graph(root)) == [["crawlfleet.frontier.config", "crawlfleet.politeness.budget"]]
    assert hidden(root) == [
        "crawlfleet.hub.urls:2 imports crawlfleet.frontier.config inside a function"
    ]
    assert into(root, ("crawlfleet.proxypool",), "crawlfleet.frontier") == [
        "crawlfleet.proxypool.store:1 imports crawlfleet.frontier.config"
    ]
    assert inline_lua(root) == ["crawlfleet.proxypool.api:2 holds a Lua script"]


def oversized(
    root: Path, module_lines: int = MODULE_LINES, function_lines: int = FUNCTION_LINES
) -> list[str]:
    """Modules longer than ``module_lines`` and functions (methods, nested ones) longer than
    ``function_lines``, decorators and docstrings included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = module_name(path, root)
        if (count := len(text.splitlines())) > module_lines:
            found.append(f"{name} has {count} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (count := (node.end_lineno or node.lineno) - first + 1) > function_lines:
                    found.append(f"{name}:{first} {node.name} has {count} lines")
    return found


def test_the_size_check_catches_planted_faults(tmp_path: Path) -> None:
    def body(lines: int, indent: int) -> str:
        return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(lines))

    method = "class C:\n    @staticmethod\n    def m():\n        def inner():\n"
    root = plant(
        tmp_path,
        {
            "fits.py": "def f():\n" + body(4, 4) + "\n" * 5,  # 5 lines, a module of 10
            "long.py": "\n" * 11,
            "nested.py": method + body(5, 12),
        },
    )
    assert oversized(root, module_lines=10, function_lines=5) == [
        "crawlfleet.long has 11 lines",
        "crawlfleet.nested:2 m has 8 lines",
        "crawlfleet.nested:4 inner has 6 lines",
    ]


def test_no_module_over_600_lines_and_no_function_over_80() -> None:
    assert oversized(PACKAGE) == []


def test_a_cycle_through_a_function_level_import_is_still_a_cycle(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "dashboard/app.py": "def create():\n    from crawlfleet.dashboard import jobs\n",
            "dashboard/jobs.py": "from crawlfleet.dashboard.app import create\n",
        },
    )
    assert cycles(graph(root)) == [["crawlfleet.dashboard.app", "crawlfleet.dashboard.jobs"]]


def test_the_hub_stands_on_nothing_of_crawlfleets() -> None:
    assert upward(PACKAGE, "crawlfleet.hub") == []


def test_no_import_cycle_anywhere_in_the_package() -> None:
    assert cycles(graph(PACKAGE)) == []


def test_every_lua_script_lives_in_a_lua_file() -> None:
    assert inline_lua(PACKAGE) == []


def test_no_package_import_hides_inside_a_function() -> None:
    assert hidden(PACKAGE) == []


def test_the_pools_jobs_alerts_acl_and_politeness_do_not_import_the_crawl_queue() -> None:
    assert into(PACKAGE, NOT_THE_CRAWL_QUEUE, "crawlfleet.frontier") == []


def test_nothing_imports_an_operator_view_from_the_worker_side() -> None:
    assert into(PACKAGE, WORKER_SIDE, "crawlfleet.views") == []
    assert into(PACKAGE, WORKER_SIDE, "crawlfleet.commands") == []
    assert into(PACKAGE, WORKER_SIDE, "crawlfleet.dashboard") == []


def test_the_cli_and_the_dashboard_are_two_faces_over_the_same_operations() -> None:
    # what `crawlfleet job`, `seed`, … do lives below both (jobs, hub, views), not in either face
    assert into(PACKAGE, ("crawlfleet.dashboard",), "crawlfleet.commands") == []
    assert into(PACKAGE, ("crawlfleet.commands",), "crawlfleet.dashboard") == []


def test_the_settings_table_stands_on_the_hub_only() -> None:
    # every worker component reads its defaults from the table: it may name the hub's values
    # (key templates, the default URL and connection parameters) and nothing above the hub
    assert [
        line
        for line in upward(PACKAGE, "crawlfleet.settingtable")
        if " imports crawlfleet.hub." not in line
    ] == []
