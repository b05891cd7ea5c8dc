"""The control node's wheelhouse builder (roles/crawlfleet_app/files/build_wheelhouse.py), loaded
as a module for the tests, and what a wheel's tags mean to pip (packaging.tags) as the reference
to check it against."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from packaging.tags import Tag, compatible_tags, cpython_tags

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles/crawlfleet_app/files/build_wheelhouse.py"
PROJECT_SCRIPT = ROOT / "roles/crawler/files/build_project.py"


def _load(name: str, path: Path) -> ModuleType:
    """A role's script as the module `name` (loaded once)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def load_builder() -> ModuleType:
    """build_wheelhouse.py as the module build_project.py imports it (`build_wheelhouse`)."""
    return _load("build_wheelhouse", SCRIPT)


def supported_tags(python: str, platforms: list[str]) -> set[Tag]:
    """Every tag pip accepts on CPython `python` (X.Y.Z) of these platforms."""
    version = tuple(int(part) for part in python.split(".")[:2])
    cp = f"cp{version[0]}{version[1]}"
    return set(cpython_tags(version, [cp], platforms)) | set(
        compatible_tags(version, cp, platforms)
    )


def load_project_builder() -> ModuleType:
    """build_project.py (role crawler's release builder) as a module, `build_project`."""
    return _load("build_project", PROJECT_SCRIPT)
