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

from caldera.baselines.volcano.nodestates import NodeStates, node_states
from caldera.core.placement import fit_on_node
from caldera.core.room import Room, TaskPlacement
from caldera.model import GPU_MILLI, JobSpec

__all__ = ["fits_nowhere", "most_pods", "nodeorder_place", "nodeorder_score"]

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

    Whether the pod fits a node and the node's score depend only on the node's state, and
    most nodes of a pool look alike (empty, or full), so each state is worked out once per
    call; the states are kept across calls (`nodestates`)."""
    if fits_nowhere(room, spec):
        return None  # most failed tries, cheaper than a look at every state
    models = spec.gpu_models
    profile = spec.gpu_profile
    states = node_states(room, profile)
    looks = states.looks(spec.gpu, spec.cpu, spec.memory)  # state -> score, -1: no fit
    candidates: Iterable[tuple[int, int]]  # (state, node)
    if within is None and models is None:
        # Every node: one look per state, at its lowest node; the best of those wins.
        candidates = states.lowest_of_each()
    else:
        state_of = states.state_of
        candidates = (
            (state_of[index], index)
            for index in (within if within is not None else range(len(room.nodes)))
            if models is None or room.nodes[index].gpu_model in models
        )
    best = -1
    best_score = -1
    for state, index in candidates:
        score = looks.get(state)
        if score is None:
            score = looks[state] = _look(room, index, spec)
        if score > best_score or (score == best_score and score >= 0 and index < best):
            best, best_score = index, score
    return _take(room, spec, best, states)


def _whole_gpus(spec: JobSpec) -> int | None:
    """The whole GPUs a pod of `spec` takes of its node (`fit_on_node`'s first check); None
    for a MIG profile or less than a GPU, where the room's buckets say nothing at once."""
    if spec.gpu_profile is not None or spec.gpu < GPU_MILLI:
        return None
    return spec.gpu // GPU_MILLI


def most_pods(room: Room, spec: JobSpec) -> int | None:
    """At most how many pods of `spec` the room takes, all its nodes together: a pod of one
    GPU or more takes that many whole GPUs of its node (`fit_on_node`), so a node takes no
    more pods than its whole free GPUs hold. The room buckets nodes by them: a few list
    reads. None where it cannot say so at once (a MIG profile, less than a GPU)."""
    need = _whole_gpus(spec)
    if need is None:
        return None
    most = 0
    for buckets in room.buckets.values():
        for whole in range(need, len(buckets)):
            most += len(buckets[whole]) * (whole // need)
    return most


def fits_nowhere(room: Room, spec: JobSpec) -> bool:
    """Does a pod of `spec` need more whole free GPUs than any node of `room` has
    (`fit_on_node`'s first check), so that `nodeorder_place` finds no node without looking
    at one? The room buckets nodes by their whole free GPUs: a few list reads. False where
    it cannot say so at once (a MIG profile, less than a GPU)."""
    need = _whole_gpus(spec)
    if need is None:
        return False
    for buckets in room.buckets.values():  # noqa: SIM110 - no generator for each call
        if any(buckets[need:]):
            return False
    return True


def _look(room: Room, index: int, spec: JobSpec) -> int:
    """A pod of `spec` on `index`: its nodeorder score, -1 where it does not fit."""
    fits = fit_on_node(room, index, spec.gpu, spec.cpu, spec.memory, spec.gpu_profile)
    return -1 if fits is None else nodeorder_score(room, index, spec)


def _take(room: Room, spec: JobSpec, best: int, states: NodeStates) -> TaskPlacement | None:
    """One pod of `spec` on node `best` (-1: none fits), room taken."""
    if best < 0:
        return None
    profile = spec.gpu_profile
    task = fit_on_node(room, best, spec.gpu, spec.cpu, spec.memory, profile)
    assert task is not None, "a node with the same state took the pod"
    room.take(task)
    states.took(best)
    return task
