"""Packing work that anchors a leaf onto as few leaves as possible.

Work no preemptor may take — critical jobs, `protected: "true"` and conformance-protected
jobs — pins the leaf (tier-1 domain) it runs on: a `hard` gang that needs a whole leaf can
never have one where such work runs. So such work goes where such work already is:
- allocate places it inside the leaf holding the most non-evictable GPUs that fits it, then
  the next, and only then anywhere (binpacking inside the leaf as usual);
- its victim search prefers plans that open no new leaf, then the leaf holding the most
  non-evictable GPUs — after work lost, own-queue victims and victims, before the victims'
  own order (`PlanCost.spread`).

Running large gangs anchor their leaf too, for the time they run: a large job never preempts
another at its priority, so a waiting gang that needs the whole leaf waits for them to end.
With `keep_leaves_whole` (off by default; config.py says why) both kinds count as a leaf's
*anchored* work, and both kinds of job pack onto it:
- a never-evicted job tries the leaves with non-evictable work first (as above), then those
  with any anchored work, the most first, and only then a leaf holding none;
- a large gang tries the leaves with anchored work first, the most first, then anywhere;
- their victim searches count a leaf's anchored work in `PlanCost.spread`.
So leaves without anchored work stay whole for the gangs that need one; the scattered room
is where small critical jobs and half-leaf gangs go.

With `pack_with_victims` a never-evicted job that would open a leaf on free room is deferred
to a victim search on the leaves holding such work first (core/defrag.py).

A cluster of one leaf changes nothing. May not: change anything but the order in which
places are tried (or, deferring, when).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from caldera.core.context import CycleContext
from caldera.core.placement import place_job
from caldera.core.room import Room, TaskPlacement
from caldera.model import GPU_MILLI, PRIORITY_CLASSES, JobSpec, JobType

__all__ = [
    "anchors",
    "count_non_evictable",
    "count_started",
    "deferred",
    "leaf_load",
    "non_evictable",
    "packing_load",
    "place_elsewhere",
    "place_packed",
    "spread",
]

_LARGE = PRIORITY_CLASSES[JobType.LARGE].value


def anchors(spec: JobSpec, keep_leaves_whole: bool) -> bool:
    """Does this job, once running, hold its leaf against a waiting large gang? Never-evicted
    work always; with `keep_leaves_whole`, large gangs too (none preempts another)."""
    return spec.never_a_victim or (keep_leaves_whole and spec.priority == _LARGE)


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


def gang_load(cycle: CycleContext) -> dict[int, int] | None:
    """Milli-GPUs per tier-1 domain held by running large gangs (the job index's possible
    victims at large-job priority, every queue), with this cycle's large starts; None when
    there is one leaf only (once per cycle)."""
    room = cycle.room
    if len(room.tier1_nodes) <= 1:
        return None

    def build() -> dict[int, int]:
        load = dict.fromkeys(room.tier1_nodes, 0)
        nodes = room.nodes
        for by_priority in cycle.snapshot.job_index.victim_devices.values():
            for node, devices in by_priority.get(_LARGE, {}).items():
                load[nodes[node].tier1] += devices * GPU_MILLI
        return load

    return cycle.memo("gang_load", build)


def packing_load(cycle: CycleContext, spec: JobSpec) -> dict[int, int] | None:
    """The per-leaf load `spec`'s placement and victim search pack against: non-evictable
    work for a never-evicted job; with `keep_leaves_whole`, anchored work (non-evictable and
    large gangs) for any job that `anchors`; None for the others, or one leaf only."""
    keep = cycle.config.keep_leaves_whole
    if not anchors(spec, keep):
        return None
    load = leaf_load(cycle)
    if load is None or not keep:
        return load
    gangs = gang_load(cycle)
    assert gangs is not None  # more than one leaf, as for leaf_load
    return {leaf: milli + gangs.get(leaf, 0) for leaf, milli in load.items()}


def place_packed(cycle: CycleContext, spec: JobSpec) -> tuple[TaskPlacement, ...] | None:
    """Place a gang (at `min_available`): a job that `anchors` inside the leaves that hold
    work it packs with first (module docstring), the most loaded first; else anywhere."""
    room = cycle.room
    tried: set[int] = set()
    for load in _packing_orders(cycle, spec):
        for leaf in sorted(
            (x for x in load if load[x] > 0 and x not in tried), key=lambda x: (-load[x], x)
        ):
            tried.add(leaf)
            placed = place_job(
                room, spec, maximum=spec.min_available, within=room.tier1_nodes[leaf]
            )
            if placed is not None:
                return placed
    anywhere = place_job(room, spec, maximum=spec.min_available)
    if anywhere is not None and _defers(cycle, spec):
        for task in reversed(anywhere):
            room.give(task)
        deferred(cycle).add(spec.id)
        return None
    return anywhere


def place_elsewhere(cycle: CycleContext, spec: JobSpec) -> tuple[TaskPlacement, ...] | None:
    """Free room for a nominated preemptor other than its promised room (allocate). With
    `pack_with_victims` a never-evicted job takes it only on the leaves holding such work: it
    waits for its victims rather than open a leaf after all (core/defrag.py)."""
    if not _defers(cycle, spec):
        return place_job(cycle.room, spec, maximum=spec.min_available)
    load = leaf_load(cycle)
    assert load is not None  # `_defers`: more than one leaf
    for leaf in sorted((x for x in load if load[x] > 0), key=lambda x: (-load[x], x)):
        nodes = cycle.room.tier1_nodes[leaf]
        placed = place_job(cycle.room, spec, maximum=spec.min_available, within=nodes)
        if placed is not None:
            return placed
    return None


def _never_lent(cycle: CycleContext, spec: JobSpec) -> bool:
    """With `pack_with_victims`: is `spec` one task of a queue no other queue ever reclaims
    from — not reclaimable, or capped at its deserved GPUs so it never borrows (DESIGN §4.1:
    reclaim takes only from reclaimable queues above their deserved share)? Such work (debug
    sessions of a capped queue) holds its leaf against another queue's gang as never-evicted
    work does, so it packs onto the same leaves, on free room only."""
    if not cycle.config.pack_with_victims or spec.tasks != 1:
        return False
    usage = cycle.usage.get(spec.queue)
    if usage is None:
        return False
    queue = usage.queue
    if not queue.reclaimable:
        return True
    return queue.capability is not None and queue.capability.gpu <= usage.deserved.gpu


def deferred(cycle: CycleContext) -> set[str]:
    """This cycle's never-evicted jobs that would open a leaf on free room and look for
    lossless victims on the leaves holding such work first (core/defrag.py)."""
    found: set[str] = cycle.memo("packing deferred", set)
    return found


def _defers(cycle: CycleContext, spec: JobSpec) -> bool:
    """With `pack_with_victims`: is `spec` never evicted, with never-evicted work running in
    some leaf (where it did not fit on free room)?"""
    if not cycle.config.pack_with_victims or not spec.never_a_victim:
        return False
    load = leaf_load(cycle)
    return load is not None and any(load.values())


def _packing_orders(cycle: CycleContext, spec: JobSpec) -> list[dict[int, int]]:
    """The leaf loads `place_packed` tries in turn: non-evictable work first for a job that
    never leaves (or, with `pack_with_victims`, that no other queue may reclaim), then
    anchored work (`packing_load`)."""
    orders: list[dict[int, int]] = []
    if spec.never_a_victim or _never_lent(cycle, spec):
        load = leaf_load(cycle)
        if load is not None:
            orders.append(load)
    if cycle.config.keep_leaves_whole:
        anchored = packing_load(cycle, spec)
        if anchored is not None:
            orders.append(anchored)
    return orders


def count_started(cycle: CycleContext, spec: JobSpec, placement: Sequence[TaskPlacement]) -> None:
    """Count a start of this cycle that packs (`anchors`), so that the next such job of the
    cycle packs with it: never-evicted work in `non_evictable`, a large gang in `gang_load`."""
    if spec.never_a_victim:
        count_non_evictable(cycle, placement)
    elif anchors(spec, cycle.config.keep_leaves_whole):
        load = gang_load(cycle)
        if load is not None:
            for task in placement:
                leaf = cycle.room.nodes[task.node].tier1
                load[leaf] = load.get(leaf, 0) + task.gpu


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
