"""The settings module a fleet worker runs a team's project with: theirs, plus the Fleet add-on.

On a worker host the crawler unit sets ``SCRAPY_SETTINGS_MODULE=crawlfleet.fleetsettings`` and
``CRAWLFLEET_PROJECT_SETTINGS`` to the project's own settings module (``myproject.settings``), so
the project's files stay untouched: every upper-case name of the project's module is taken as it
is, and ``crawlfleet.addon.Fleet`` is added to its ``ADDONS`` (kept where the project already
lists it). ``FLEET_ENVIRONMENT_WINS`` tells the add-on that the worker environment's connection
settings (the hub's Redis URL, the pools' URLs and keys) override whatever the project wrote for
its developers' machines; component choices stay the project's.

A missing or unimportable project module stops the worker at once with one line naming the
variable and the cause.
"""

from __future__ import annotations

import os
from importlib import import_module
from typing import Any

PROJECT_VARIABLE = "CRAWLFLEET_PROJECT_SETTINGS"
ADDON = "crawlfleet.addon.Fleet"


class FleetSettingsError(ImportError):
    """The project's settings module cannot be used (one line, naming the variable)."""


def project_settings(module_name: str | None) -> dict[str, Any]:
    """The upper-case names of the project's settings module, with the Fleet add-on enabled."""
    if not module_name:
        raise FleetSettingsError(
            f"{PROJECT_VARIABLE} is not set; it names the project's settings module "
            "(for example myproject.settings)"
        )
    try:
        module = import_module(module_name)
    except Exception as exc:  # any error of the project's own module: say which and why
        raise FleetSettingsError(
            f"{PROJECT_VARIABLE}={module_name!r} does not import: {type(exc).__name__}: {exc}"
        ) from None
    values = {name: value for name, value in vars(module).items() if name.isupper()}
    addons = dict(values.get("ADDONS") or {})
    if ADDON not in addons and not any(
        getattr(key, "__module__", "") + "." + getattr(key, "__name__", "") == ADDON
        for key in addons
    ):
        addons[ADDON] = 0
    values["ADDONS"] = addons
    values["FLEET_ENVIRONMENT_WINS"] = True
    return values


globals().update(project_settings(os.environ.get(PROJECT_VARIABLE)))
