"""Reservations for starving large jobs (DESIGN §4.4), made at the start of allocate.

A large job that has waited a quarter of its start SLO (15 min of the default hour) is
*starving*. The highest-ranked starving job of each queue either starts now, on free room
before anybody else is placed, or reserves the free whole GPUs of one domain it could run in:
nobody else — no later job of its own queue at equal priority, no job of another queue, no
backfill — takes that room in this cycle, so room freed there accumulates until the job fits.
The throttle keeps new lower-priority submissions out of the queue; the reservation keeps
freed room for the job against equal-priority competitors too.

Which domain: one its topology allows (its tier; a gang without a constraint, the smallest
tier one of whose domains could hold it), that could ever hold it once evictable work is
gone, with the most free whole GPUs — the room it reserved in earlier cycles is still free,
so the choice is stable — then the least non-evictable work (critical, protected), then the
lowest id. Critical jobs are placed before (their own pass), so a reservation never delays
them; the job may still search for victims with its reserved room counted as free.

May: start a starving job, reserve free room for it. May not: evict, start anything else, or
reserve for a job its queue's capability holds back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from caldera.core.context import CycleContext
from caldera.core.estimates import starving_from
from caldera.core.packing import count_started, non_evictable, pinned_only, place_packed
from caldera.core.planning import plan_start, plans
from caldera.core.room import DomainLayout, Room, TaskPlacement
from caldera.core.snapshot import JobView
from caldera.model import GPU_MILLI, PRIORITY_CLASSES, JobSpec, JobType, TopologyMode

__all__ = ["reserve_for_starving", "starving"]

LARGE = PRIORITY_CLASSES[JobType.LARGE].value


def starving(cycle: CycleContext, job: JobView) -> bool:
    """A pending large job that has waited a quarter of its start SLO."""
    if job.nomination is not None:
        return False
    starves = starving_from(job.spec, cycle.config)
    return starves is not None and cycle.now >= starves


def reserve_for_starving(cycle: CycleContext) -> set[str]:
    """Start or reserve room for each queue's highest-ranked starving large job, in this
    pass. Returns the jobs started."""
    heads: dict[str, JobView] = {}
    for key, jobs in cycle.eligible_groups:
        if key[1] != LARGE or key[0] not in cycle.usage or not cycle.in_pass(key):
            continue
        for job in jobs:  # a group is in rank order: one type, oldest submission first
            if job.id in cycle.decided.started or job.nomination is not None:
                continue
            if starving(cycle, job):
                best = heads.get(key[0])
                if best is None or job.spec.rank < best.spec.rank:
                    heads[key[0]] = job
            break  # the first that could starve does, or none after it does yet
    started: set[str] = set()
    for job in sorted(heads.values(), key=lambda j: j.spec.rank):
        spec = job.spec
        if not cycle.usage[spec.queue].within_capability(spec.gang_request):
            continue
        if not cycle.may_return(job):
            continue
        placement = place_packed(cycle, spec)
        if placement is not None:
            cycle.start(job, placement)
            count_started(cycle, spec, placement)
            started.add(job.id)
            continue
        domain = _domain(cycle, spec)
        if domain is not None:
            # Its planned start, where someone reads it: its waiting reason, backfill.
            wanted = cycle.snapshot.explain or cycle.config.planned_backfill
            planned = plan_start(cycle, job, domain) if wanted else None
            cycle.reserve(job.id, _free_whole(cycle, spec, domain))
            if planned is not None:
                plans(cycle)[job.id] = planned
    return started


def _free_whole(
    cycle: CycleContext, spec: JobSpec, nodes: Sequence[int]
) -> tuple[TaskPlacement, ...]:
    room = cycle.room
    models = spec.gpu_models
    parts: list[TaskPlacement] = []
    for index in nodes:
        if not room.whole[index]:
            continue  # no whole GPU free here (a busy cluster's usual node)
        if models is not None and room.nodes[index].gpu_model not in models:
            continue
        devices = tuple(d for d, left in enumerate(room.free[index]) if left == GPU_MILLI)
        devices = tuple(d for d in devices if d < room.nodes[index].gpus)  # not MIG slices
        if devices:
            parts.append(TaskPlacement(index, devices, GPU_MILLI))
    return tuple(parts)


def _held(
    room: Room,
    tier: int,
    models: frozenset[str] | None,
    layout: DomainLayout,
    pinned: Mapping[int, int],
) -> dict[int, int]:
    """Non-evictable milli-GPUs per domain of the layout."""
    held = dict.fromkeys(layout, 0)
    for node, milli in pinned.items():
        domain = room.nodes[node].tier1 if tier <= 1 else room.nodes[node].tier2
        if domain in held and (models is None or room.nodes[node].gpu_model in models):
            held[domain] += milli
    return held


def _domain(cycle: CycleContext, spec: JobSpec) -> tuple[int, ...] | None:
    """The domain to reserve in (see the module docstring), or None."""
    room = cycle.room
    need = spec.whole_gpus * spec.min_available
    if need == 0:
        return None
    topology = spec.topology
    if topology is not None:
        tiers: tuple[int, ...] = (topology.highest_tier,)
        if topology.mode is TopologyMode.SOFT and topology.highest_tier < 2:
            tiers = (topology.highest_tier, 2)
    else:
        tiers = (1, 2)
    models = spec.gpu_models
    kept = pinned_only(cycle)
    for tier in tiers:
        level = 1 if tier <= 1 else 2
        layout = room.domain_layout(level, models)
        able = partial(_able, room, level, models, layout, spec.whole_gpus, spec.min_available)
        if kept:  # the index's own count: the domains it leaves last across cycles
            key = ("reservation domains", room.token, level, models, need, spec.whole_gpus)
            domains = cycle.snapshot.job_index.from_pinned(key, able)
        else:
            domains = able(non_evictable(cycle))
        order, usable = domains
        if order:
            # The most free whole GPUs; ties to the least non-evictable work, then the lowest
            # id — `order`'s own order, and max() keeps the first of equals.
            if models is None:
                whole = room.tier1_whole if level == 1 else room.tier2_whole
                return usable[max(order, key=whole.__getitem__)]
            free = {d: sum(room.whole[n] for n in usable[d]) for d in order}
            return usable[max(order, key=free.__getitem__)]
        if topology is not None and topology.mode is TopologyMode.HARD:
            return None
    return None


def _able(
    room: Room,
    tier: int,
    models: frozenset[str] | None,
    layout: DomainLayout,
    per_task: int,
    minimum: int,
    pinned: Mapping[int, int],
) -> tuple[list[int], dict[int, tuple[int, ...]]]:
    """The domains of the layout that could ever hold the gang — `minimum` tasks of
    `per_task` whole GPUs, each on one node — while their non-evictable work runs, by that
    work then id; and their usable nodes. A domain whose nodes are too small for a task
    never can, however empty: reserving it would only hold everyone else back."""
    held = _held(room, tier, models, layout, pinned)
    nodes = room.nodes
    able = {
        domain: usable
        for domain, (usable, capacity) in layout.items()
        if capacity - held[domain] >= per_task * minimum * GPU_MILLI
        and sum(nodes[n].gpus // per_task for n in usable) >= minimum
    }
    return sorted(able, key=lambda domain: (held[domain], domain)), able
