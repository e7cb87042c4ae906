"""The service's rooms (issue 35): each module does one thing a reader can hold at once, and
the runtime is the loop and the calls — admitting submissions and applying a poll live in
their own modules."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "src" / "caldera" / "service"


def test_no_module_of_the_service_is_over_500_lines() -> None:
    long = {
        path.relative_to(SERVICE).as_posix(): lines
        for path in SERVICE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}


def test_the_runtime_leaves_admission_and_polling_to_their_modules() -> None:
    """Defined once: `submissions.admit` builds a submission's job (its spec from the
    request record), `polling.poll` applies what `observe` saw; the runtime calls them."""
    defined: dict[str, set[str]] = {}
    for name in ("runtime", "submissions", "polling"):
        tree = ast.parse((SERVICE / f"{name}.py").read_text(encoding="utf-8"))
        defined[name] = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert {"admit", "accept"} <= defined["submissions"]
    assert "poll" in defined["polling"]
    assert not {"_admit", "_poll", "_accept_group", "_commit", "_reported"} & defined["runtime"]
