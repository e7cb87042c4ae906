"""Packing non-evictable work onto as few leaves as possible.

Work no preemptor may take — critical jobs, `protected: "true"` and conformance-protected
jobs — pins the leaf (tier-1 domain) it runs on: a `hard` gang that needs a whole leaf can
never have one where such work runs. So such work goes where such work already is:
- allocate places it inside the leaf holding the most non-evictable GPUs that fits it, then
  the next, and only then anywhere (binpacking inside the leaf as usual);
- its victim search prefers plans that open no new leaf, then the leaf holding the most
  non-evictable GPUs — after work lost, own-queue victims and victims, before the victims'
  own order (`PlanCost.spread`).
A cluster of one leaf changes nothing. May not: change anything but the order in which
places are tried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from caldera.core.context import CycleContext
from caldera.core.placement import place_job
from caldera.core.room import Room, TaskPlacement
from caldera.model import CRITICAL_PRIORITY, JobSpec

__all__ = [
    "count_non_evictable",
    "leaf_load",
    "never_evicted",
    "non_evictable",
    "place_packed",
    "spread",
]


def never_evicted(spec: JobSpec) -> bool:
    """Would this job, once running, be out of every preemptor's reach? (As the job index's
    victim filter: label protected, critical priority, conformance-protected.)"""
    return spec.protected or spec.priority >= CRITICAL_PRIORITY or spec.conformance_protected


def non_evictable(cycle: CycleContext) -> dict[int, int]:
    """Milli-GPUs per node held by running work that is never a victim (once per cycle)."""

    def build() -> dict[int, int]:
        # The job index keeps the running jobs' count; this cycle's starts are added to a copy.
        return dict(cycle.snapshot.job_index.pinned)

    return cycle.memo("non_evictable", build)


def pinned_only(cycle: CycleContext) -> bool:
    """Is `non_evictable` still the job index's `pinned` (nothing never-evicted started in
    this cycle yet)? Then what derives from it may be kept across cycles in the index."""
    return not _grew(cycle)[0]


def _grew(cycle: CycleContext) -> list[bool]:
    """This cycle's flag: has `count_non_evictable` added to `non_evictable` yet?"""
    return cycle.memo("non_evictable grew", lambda: [False])


def leaf_load(cycle: CycleContext) -> dict[int, int] | None:
    """Non-evictable milli-GPUs per tier-1 domain, or None when there is one leaf only."""
    room = cycle.room
    if len(room.tier1_nodes) <= 1:
        return None

    def build() -> dict[int, int]:
        load = dict.fromkeys(room.tier1_nodes, 0)
        for node, milli in non_evictable(cycle).items():
            load[room.nodes[node].tier1] += milli
        return load

    return cycle.memo("leaf_load", build)


def spread(
    room: Room, placement: Sequence[TaskPlacement], load: Mapping[int, int]
) -> tuple[int, int]:
    """How much a placement spreads non-evictable work: leaves it opens (holding none yet),
    then minus the non-evictable GPUs its leaves already hold. Smaller packs better."""
    leaves = {room.nodes[task.node].tier1 for task in placement}
    return (sum(1 for leaf in leaves if load.get(leaf, 0) == 0), -sum(load[x] for x in leaves))


def place_packed(cycle: CycleContext, spec: JobSpec) -> tuple[TaskPlacement, ...] | None:
    """Place a gang (at `min_available`) that will never be evicted: inside the leaves that
    hold non-evictable work first, the most loaded first; else anywhere."""
    room = cycle.room
    load = leaf_load(cycle)
    if load is not None:
        for leaf in sorted((x for x in load if load[x] > 0), key=lambda x: (-load[x], x)):
            placed = place_job(
                room, spec, maximum=spec.min_available, within=room.tier1_nodes[leaf]
            )
            if placed is not None:
                return placed
    return place_job(room, spec, maximum=spec.min_available)


def count_non_evictable(cycle: CycleContext, placement: Sequence[TaskPlacement]) -> None:
    """Count work started in this cycle that will never be evicted, so that the next such
    job of the cycle packs onto the same leaf."""
    held = non_evictable(cycle)
    load = leaf_load(cycle)
    _grew(cycle)[0] = True
    for task in placement:
        held[task.node] = held.get(task.node, 0) + task.gpu
        if load is not None:
            leaf = cycle.room.nodes[task.node].tier1
            load[leaf] = load.get(leaf, 0) + task.gpu
