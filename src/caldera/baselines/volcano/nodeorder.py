"""S4: how `volcano-seed001` scores nodes — Volcano's nodeorder plugin with its default
weights, not binpack (seed 001 names no binpack plugin).

Citing Volcano v1.15.1's pkg/scheduler/plugins: nodeorder/nodeorder.go calculateWeight
(leastrequested 1, balancedresource 1, mostrequested 0) and OnSessionOpen, which builds
Kubernetes' NodeResourcesFit LeastAllocated over cpu and memory (weights 50/50) and
NodeResourcesBalancedAllocation over cpu, memory and nvidia.com/gpu (k8s.io/kubernetes v1.35.3
pkg/scheduler/framework/plugins/noderesources: least_allocated.go leastRequestedScore,
balanced_allocation.go balancedResourceScorer, resource_allocation.go: LeastAllocated counts a
pod that asks for no cpu or memory as 100m / 200 MiB — schedutil's non-zero defaults —,
BalancedAllocation counts what pods ask and skips the GPU for a pod that asks for none). The
other nodeorder scores (node and pod affinity, taints, image locality, topology spread) are
equal on every node here. Both are integers 0-100: a pod goes to the node where, after it,
cpu, memory and GPUs are most evenly used — for GPU pods asking for little cpu, the node with
the fewest GPUs in use: Volcano as seed 001 runs it SPREADS GPU pods, and 8-GPU pods find no
whole node sooner than under binpack. Volcano picks at random among equal best scores
(util.SelectBestNodeAndScore); here the lowest node index wins.

Reads only the room and the job's shape: no session, so allocate (through the session's
`Staged`) and preempt both call it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import methodcaller

from caldera.core.placement import fit_on_node
from caldera.core.room import Room, TaskPlacement
from caldera.model import GPU_MILLI, JobSpec, Node

__all__ = ["nodeorder_place", "nodeorder_score"]

_MAX_NODE_SCORE = 100  # fwk.MaxNodeScore
_NON_ZERO_CPU = 100  # schedutil.DefaultMilliCPURequest, millicores
_NON_ZERO_MEMORY = 200  # schedutil.DefaultMemoryRequest, MiB


def _least_requested(used: int, asked: int, capacity: int) -> int:
    """leastRequestedScore: the unused part after the pod, 0-100, integer arithmetic."""
    total = used + asked
    if total > capacity:
        return 0
    return (capacity - total) * _MAX_NODE_SCORE // capacity


def nodeorder_score(room: Room, index: int, spec: JobSpec) -> int:
    """S4: nodeorder's score of `index` for one pod of `spec` with seed 001's (default)
    weights: LeastAllocated (cpu, memory) + BalancedAllocation (cpu, memory, GPUs).
    Approximation: LeastAllocated counts the non-zero default for the incoming pod only, not
    for pods already on the node that ask for no cpu or memory (the room does not keep pod
    counts); at 100m of a node's cores per pod this moves no integer score below 12 pods
    on a 128-core node."""
    node = room.nodes[index]
    cpu_used = node.cpu - room.cpu[index]
    memory_used = node.memory - room.memory[index]
    least = weights = 0
    if node.cpu > 0:
        least += 50 * _least_requested(cpu_used, spec.cpu or _NON_ZERO_CPU, node.cpu)
        weights += 50
    if node.memory > 0:
        least += 50 * _least_requested(memory_used, spec.memory or _NON_ZERO_MEMORY, node.memory)
        weights += 50
    fractions: list[float] = []
    if node.cpu > 0:
        fractions.append(min((cpu_used + spec.cpu) / node.cpu, 1.0))
    if node.memory > 0:
        fractions.append(min((memory_used + spec.memory) / node.memory, 1.0))
    if spec.gpu > 0 and node.gpus > 0:
        gpu_used = sum(GPU_MILLI - free for free in room.free[index][: node.gpus])
        fractions.append(min((gpu_used + spec.gpu) / (node.gpus * GPU_MILLI), 1.0))
    std = 0.0
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    balanced = int((1 - std) * _MAX_NODE_SCORE)
    return (least // weights if weights else 0) + balanced


def nodeorder_place(
    room: Room, spec: JobSpec, within: Sequence[int] | None
) -> TaskPlacement | None:
    """S4: one pod on the best-scored node it fits (ties: lowest index), room taken.

    Whether the pod fits a node and the node's score depend only on the node's shape and
    what is free on it, and most nodes of a pool look alike (empty, or full), so each look
    is worked out once per call (`_node_state` says what it is made of)."""
    models = spec.gpu_models
    profile = spec.gpu_profile
    shapes = _node_shapes(room.nodes)
    best = -1
    best_score = -1
    if within is None and models is None:
        # Every node: their states are built and told apart in C, each with the lowest
        # node in it; one look per state, the best of those lowest nodes wins.
        for index in _first_of_each_state(room, shapes, profile).values():
            fits = fit_on_node(room, index, spec.gpu, spec.cpu, spec.memory, profile)
            look = -1 if fits is None else nodeorder_score(room, index, spec)
            if look > best_score or (look == best_score and look >= 0 and index < best):
                best, best_score = index, look
        return _take(room, spec, best)
    looks: dict[tuple[object, ...], int] = {}  # node state -> score, -1: does not fit
    for index in within if within is not None else range(len(room.nodes)):
        if models is not None and room.nodes[index].gpu_model not in models:
            continue
        state = _node_state(room, index, shapes, profile)
        score = looks.get(state)
        if score is None:
            fits = fit_on_node(room, index, spec.gpu, spec.cpu, spec.memory, profile)
            score = -1 if fits is None else nodeorder_score(room, index, spec)
            looks[state] = score
        if score > best_score or (score == best_score and score >= 0 and index < best):
            best, best_score = index, score
    return _take(room, spec, best)


def _take(room: Room, spec: JobSpec, best: int) -> TaskPlacement | None:
    """One pod of `spec` on node `best` (-1: none fits), room taken."""
    if best < 0:
        return None
    profile = spec.gpu_profile
    task = fit_on_node(room, best, spec.gpu, spec.cpu, spec.memory, profile)
    assert task is not None, "a node with the same state took the pod"
    room.take(task)
    return task


_SHAPES: dict[int, tuple[tuple[Node, ...], list[tuple[object, ...]]]] = {}


def _node_shapes(nodes: tuple[Node, ...]) -> list[tuple[object, ...]]:
    """Per node, what `fit_on_node` and `nodeorder_score` read of it that never changes."""
    known = _SHAPES.get(id(nodes))
    if known is None or known[0] is not nodes:
        shapes: list[tuple[object, ...]] = [
            (n.cpu, n.memory, n.gpus, n.island_size, n.slices) for n in nodes
        ]
        _SHAPES.clear()  # one cluster at a time is the common case; never grows
        _SHAPES[id(nodes)] = known = (nodes, shapes)
    return known[1]


def _first_of_each_state(
    room: Room, shapes: list[tuple[object, ...]], profile: str | None
) -> dict[tuple[object, ...], int]:
    """Every node's `_node_state`, each state with the lowest node index that has it (a
    dict keeps the last value given to a key: fed from the last node to the first)."""
    count = len(shapes)
    slices: Iterable[bool] = (
        repeat(False)
        if profile is None
        else map(bool, map(methodcaller("get", profile), room.slices))
    )
    states = list(
        zip(
            shapes,
            room.cpu,
            room.memory,
            map(_HOLDS_A_POD, room.pods),
            map(tuple, room.free),
            slices,
            strict=False,  # `slices` may be endless (repeat)
        )
    )
    return dict(zip(reversed(states), range(count - 1, -1, -1), strict=True))


_HOLDS_A_POD = (0).__lt__
"""pods > 0: the node takes another pod."""


def _node_state(
    room: Room, index: int, shapes: list[tuple[object, ...]], profile: str | None
) -> tuple[object, ...]:
    """All a pod's fit and nodeorder score on `index` depend on: the node's shape, its free
    cpu, memory and devices, whether it takes another pod, and its free slices of `profile`."""
    slices = bool(room.slices[index].get(profile)) if profile is not None else False
    return (
        shapes[index],
        room.cpu[index],
        room.memory[index],
        room.pods[index] > 0,
        tuple(room.free[index]),
        slices,
    )
