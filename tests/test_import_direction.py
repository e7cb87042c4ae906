"""The import graph points one way (docs/architecture.md): every `import caldera.X` in every
module, including imports inside functions and under TYPE_CHECKING, is checked against the
layers below. A runtime never imports another runtime or the simulator; the core never
imports the baselines, the registry or anything that applies its decisions; the SDK never
imports a runtime: on a cluster it speaks the TrainingJob API through `caldera.trainingjob_api`,
which the controller shares, so a user's program never loads the controller."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "caldera"

# package -> the caldera packages it must never import (directly, at any place in a module).
RUNTIMES = {"sim", "service", "k8s"}
# The commands and tools on top of everything: the dev cluster and the benchmarks are
# developers' tools beside the controller, which may import it but never the other way.
ABOVE = {"cli", "report", "bench", "replay", "devcluster"}
# The bottom layers, and the SDK users import into their own programs, may import only these
# caldera packages.
ONLY: dict[str, set[str]] = {
    "errors": set(),
    "model": {"errors"},
    "trainingjob_api": {"errors", "model"},
    "sdk": {"errors", "trainingjob_api"},
}
FORBIDDEN: dict[str, set[str]] = {
    "core": {"baselines", "policies", "config", "runtime", *RUNTIMES, *ABOVE},
    "baselines": {"policies", "config", "runtime", *RUNTIMES, *ABOVE},
    "policies": {"config", "runtime", *RUNTIMES, *ABOVE},
    "config": {"runtime", *RUNTIMES, *ABOVE},
    "runtime": {*RUNTIMES, *ABOVE},
    "sim": {"service", "k8s", *ABOVE},
    "service": {"sim", "k8s", *ABOVE},
    "k8s": {"sim", "service", *ABOVE},
    # the dev cluster starts a control plane: it may use the controller's client, nothing
    # that drives it (the benchmarks, the replay, the commands) and no other runtime
    "devcluster": {"sim", "service", *ABOVE - {"devcluster"}},
}
_ALL = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {
    p.stem for p in SRC.glob("*.py") if p.stem != "__init__"
}


def _package(module: Path) -> str:
    return module.relative_to(SRC).parts[0].removesuffix(".py")


def _imported(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "caldera" and len(parts) > 1:
                found.add(parts[1])
    return found


def _edges() -> list[tuple[str, str, str]]:
    edges = []
    for module in sorted(SRC.rglob("*.py")):
        package = _package(module)
        for target in _imported(ast.parse(module.read_text(encoding="utf-8"))):
            if target != package:
                edges.append((package, target, str(module.relative_to(SRC))))
    return edges


def test_the_graph_is_read_from_every_module() -> None:
    edges = _edges()
    assert ("sim", "core", "sim/engine.py") in edges  # the reader finds real imports
    assert len({module for _, _, module in edges}) > 50


@pytest.mark.parametrize("package", sorted({*FORBIDDEN, *ONLY}))
def test_no_forbidden_import(package: str) -> None:
    forbidden = _ALL - {package} - ONLY[package] if package in ONLY else FORBIDDEN[package]
    bad = [
        f"{module} imports caldera.{target}"
        for source, target, module in _edges()
        if source == package and target in forbidden
    ]
    assert not bad, "\n".join(bad)


def test_the_tools_beside_the_controller_import_it_not_the_other_way() -> None:
    """The dev cluster and the Kubernetes benchmark live outside `caldera.k8s` and point at
    it: the benchmark drives the controller on a dev cluster, the dev cluster installs CRDs
    with the controller's client; nothing in `caldera.k8s` names either of them."""
    edges = {(source, target) for source, target, _ in _edges()}
    assert ("bench", "k8s") in edges and ("bench", "devcluster") in edges
    assert ("devcluster", "k8s") in edges
    assert not {("k8s", "devcluster"), ("k8s", "bench"), ("devcluster", "bench")} & edges
    assert not [p.name for p in (SRC / "k8s").iterdir() if p.name.startswith(("dev", "bench"))]


def test_the_sdk_loads_no_controller() -> None:
    """What a user's program gets by importing the SDK, transitive imports included."""
    code = (
        "import sys, caldera.sdk, caldera.sdk.kube, caldera.sdk.preemption\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['caldera', 'k8s'], ['caldera', 'service'], ['caldera', 'runtime'])))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    assert loaded == "[]"


def test_every_runtime_drives_the_one_scheduling_loop() -> None:
    """The scheduling loop (repeat until quiet, the timer) lives once, in
    `caldera.runtime.loop`, which needs only the core; the simulator, the service and the
    controller each import it rather than loop on their own."""
    edges = _edges()
    assert {target for _, target, module in edges if module == "runtime/loop.py"} == {"core"}
    for path in ("sim/engine.py", "service/runtime.py", "k8s/runtime.py"):
        tree = ast.parse((SRC / path).read_text(encoding="utf-8"))
        names = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "caldera.runtime"
            for alias in node.names
        }
        assert "SchedulerLoop" in names, path
        assert not names & {"MAX_CYCLES_AT_ONCE", "run_again"}, path


# The controller's rooms (docs/architecture.md): the room -> the rooms it must never import.
# `cluster` is the I/O seam, knowing nothing of the controller above it (its in-memory fake
# reads a pod's requests as `reading` does); `ha` keeps state through that seam alone;
# `reading` and `reporting` are read and written by the controller, never the other way.
K8S_ROOMS = {"cluster", "reading", "observe", "effects", "reporting", "access", "ha"}
K8S_FORBIDDEN: dict[str, set[str]] = {
    "cluster": K8S_ROOMS - {"cluster"},
    "ha": K8S_ROOMS - {"cluster", "ha"},
    "reading": {"observe", "reporting", "access", "ha"},
    "reporting": {"observe", "effects", "reading", "access", "ha"},
}
K8S_TOP_ONLY = {"controller"}  # nothing in a room drives the controller loop


def _k8s_edges() -> list[tuple[str, str, str]]:
    edges = []
    for module in sorted((SRC / "k8s").rglob("*.py")):
        parts = module.relative_to(SRC / "k8s").parts
        room = parts[0] if len(parts) > 1 else ""
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                target = name.split(".")
                if target[:2] == ["caldera", "k8s"] and len(target) > 2 and target[2] != room:
                    edges.append((room, target[2], "/".join(parts)))
    return edges


def test_the_controller_is_in_rooms() -> None:
    rooms = {p.name for p in (SRC / "k8s").iterdir() if (p / "__init__.py").exists()}
    assert rooms == K8S_ROOMS
    assert len(list((SRC / "k8s").glob("*.py"))) <= 12, "new modules belong in a room"


@pytest.mark.parametrize("room", sorted(K8S_FORBIDDEN))
def test_no_room_of_the_controller_imports_upward(room: str) -> None:
    edges = _k8s_edges()
    assert any(source == room for source, _, _ in edges) or room == "cluster"
    bad = [
        f"k8s/{module} imports caldera.k8s.{target}"
        for source, target, module in edges
        if source == room
        and (target in K8S_FORBIDDEN[room] or target in K8S_TOP_ONLY)
        and module != "cluster/fake.py"
    ]
    assert not bad, "\n".join(bad)
