"""One error hierarchy (issue 8): every exception class caldera defines is a `CalderaError`,
so a caller can catch caldera's errors with one `except` and the CLI can turn each into a
one-line message. The tree is drawn in `caldera.errors`'s docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import caldera
from caldera.errors import CalderaError

# Not modules to import: alembic's migration scripts run only inside alembic.
SCRIPTS = ("caldera.service.migrations", "caldera.__main__")
# Exceptions used as control flow, never raised to a caller. A private class (`_Busy`: a retry
# signal inside the Kubernetes client, which leaves it as ClusterUnavailable) is one by its name.
CONTROL_FLOW = {
    # the /ui pages answer it with a redirect to the login page (a FastAPI exception handler)
    "caldera.service.ui.auth.LoginRequired",
}


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(caldera.__path__, prefix="caldera."):
        if info.name.startswith(SCRIPTS):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_exception_caldera_defines_is_a_caldera_error() -> None:
    defined = _defined_exceptions()
    assert "caldera.errors.ScenarioError" in defined  # the walk does reach the modules
    strays = sorted(
        name
        for name, cls in defined.items()
        if not issubclass(cls, CalderaError)
        and name not in CONTROL_FLOW
        and not cls.__name__.startswith("_")
    )
    assert strays == []


def test_the_control_flow_exceptions_still_exist() -> None:
    assert set(_defined_exceptions()) >= CONTROL_FLOW
