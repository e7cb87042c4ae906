"""Backing off (core/backoff.py): the rule, and that the core asks it in one place.

give_way, the quiet-cycle check and the waiting reasons each wrote the test out once; a
change to one of them (say, critical jobs backing off too) would have left the others
deciding by the old rule. Now each passes the job's last failed search to `back_off_ends`,
and the test below checks that no module of the core reads that time any other way."""

from __future__ import annotations

import ast
from pathlib import Path

import caldera.core
from caldera.core.backoff import back_off_ends
from caldera.model import CRITICAL_PRIORITY

CORE = Path(caldera.core.__file__).resolve().parent


def test_a_failed_search_backs_a_non_critical_job_off_until_the_back_off_ends() -> None:
    assert back_off_ends(100.0, 0, 110.0, 30.0) == 130.0
    assert back_off_ends(100.0, CRITICAL_PRIORITY - 1, 129.9, 30.0) == 130.0
    assert back_off_ends(100.0, 0, 130.0, 30.0) is None  # it ends at exactly the back-off
    assert back_off_ends(None, 0, 110.0, 30.0) is None  # never failed
    assert back_off_ends(100.0, CRITICAL_PRIORITY, 110.0, 30.0) is None  # critical: searches
    assert back_off_ends(100.0, 0, 100.0, 0.0) is None  # no back-off set


def test_the_core_reads_a_failed_search_only_to_ask_the_back_off_rule() -> None:
    """Every read of `preempt_failed_at` in the core is the first argument of a call to
    `back_off_ends`, and at least one module asks it that way."""
    asked = 0
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        passed = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "back_off_ends":
                passed.add(id(node.args[0]))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "preempt_failed_at":
                where = f"{path.relative_to(CORE)}:{node.lineno}"
                assert id(node) in passed, f"{where} reads preempt_failed_at outside back_off_ends"
                asked += 1
    assert asked >= 3  # give_way, the quiet-cycle check, the waiting reasons
