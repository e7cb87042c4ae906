"""The TrainingJob API's words (group, version, kind, plural, caldera's labels and annotations)
are defined once, in `caldera.trainingjob_api`, and read from there: no module reads them
through `caldera.k8s.names`, which keeps only the controller's own keys. tests/k8s_real is
left to its own change (`names` still answers the five words it reads)."""

from __future__ import annotations

import ast
from pathlib import Path

from caldera import trainingjob_api
from caldera.k8s import names

ROOT = Path(__file__).resolve().parents[2]
WORDS = {word for word in trainingjob_api.__all__ if word.isupper()}


def _sources() -> list[Path]:
    tests = [p for p in (ROOT / "tests").rglob("*.py") if "k8s_real" not in p.parts]
    return sorted((ROOT / "src" / "caldera").rglob("*.py")) + sorted(tests)


def _reads_through_names(path: Path) -> list[str]:
    """`names.WORD` where `names` is `caldera.k8s.names`, and `from caldera.k8s.names import
    WORD`: each as 'path:line WORD'."""
    tree = ast.parse(path.read_text(), str(path))
    imported = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "caldera.k8s"
        and any(alias.name == "names" and alias.asname is None for alias in node.names)
        for node in ast.walk(tree)
    )
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            imported
            and isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "names"
            and node.attr in WORDS
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "caldera.k8s.names":
            found.extend(
                f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}"
                for alias in node.names
                if alias.name in WORDS
            )
    return found


def test_the_trainingjob_words_are_read_from_trainingjob_api() -> None:
    found = [hit for path in _sources() for hit in _reads_through_names(path)]
    assert found == []


def test_names_exports_only_its_own_keys() -> None:
    assert not WORDS & set(names.__all__)
    assert all(not hasattr(trainingjob_api, name) for name in names.__all__)
