"""Where the core's speed machinery sits: the shortcuts (core/shortcuts/: the memo of failed
searches and the quiet cycles) decide nothing, so no decision module may depend on the quiet
cycles, and a cycle takes them only where `core/cycle.py` asks the policy whether it
remembers them (`Policy.remembers_quiet_cycles`, not which policy it is)."""

from __future__ import annotations

import ast
from pathlib import Path

import caldera.core

CORE = Path(caldera.core.__file__).resolve().parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_only_the_cycle_runs_quiet_cycles() -> None:
    """(The memo beside it names the record's type, `QuietCycle`, for type checking only.)"""
    importers = sorted(
        path.relative_to(CORE).as_posix()
        for path in CORE.rglob("*.py")
        if "caldera.core.shortcuts.quiet" in _imports(path)
    )
    assert importers == ["cycle.py", "shortcuts/memo.py"]


def test_the_cycle_asks_the_policy_not_which_policy_it_is() -> None:
    tree = ast.parse((CORE / "cycle.py").read_text())
    identity = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, ast.Is) for op in node.ops)
        and any(getattr(side, "id", None) == "CALDERA" for side in (node.left, *node.comparators))
    ]
    assert identity == []
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert "remembers_quiet_cycles" in attributes


def test_no_module_of_the_core_is_over_500_lines() -> None:
    """Each module of the core does one thing a reader can hold at once (issue 35): the
    victim search, give_way and the cycle context were split by what they do to stay under."""
    long = {
        path.relative_to(CORE).as_posix(): lines
        for path in CORE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 500
    }
    assert long == {}
