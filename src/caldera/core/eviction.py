"""Shared driver of phases 3 (preempt) and 4 (reclaim): turn victim plans into evictions.

For each job allocate could not place, highest priority first: if it already holds a
nomination, keep signalling the victims its plan still needs (within the budget); otherwise
look for a plan among the victims the phase allows, evict it (two-phase, graceful) and
nominate the room for the preemptor. Debug jobs (policy Never) never get here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from caldera.core.allocate import job_order
from caldera.core.context import CycleContext, shape_key
from caldera.core.decisions import Evict, EvictReason, Nominate
from caldera.core.snapshot import JobView, Nomination
from caldera.core.victims import Plan, Unit, VictimIndex, find_plan, is_protected, victim_units
from caldera.core.weight import effective_weight
from caldera.model import CRITICAL_PRIORITY, JobState, JobType

__all__ = ["VictimPool", "continue_nominations", "give_way"]

VictimPool = Callable[[JobView, dict[str, list[JobView]]], list[JobView]]
"""(preemptor, victims by queue) -> the running jobs this phase may consider for it."""


def _victims_by_queue(cycle: CycleContext) -> dict[str, list[JobView]]:
    """Running jobs that could ever be victims, by queue (preemptor-independent rules)."""
    by_queue: dict[str, list[JobView]] = {}
    for victim in cycle.snapshot.jobs:
        if victim.state is not JobState.RUNNING or is_protected(victim):
            continue
        if victim.id in cycle.started or len(victim.placement) < victim.spec.min_available:
            continue
        by_queue.setdefault(victim.spec.queue, []).append(victim)
    return by_queue


def _eligible(cycle: CycleContext, preemptor: JobView, victim: JobView) -> bool:
    """The preemptor-dependent rules (DESIGN §4.1 step 1, §4.5)."""
    if victim.id in cycle.evicted:
        return False
    priority = preemptor.spec.priority
    if victim.spec.priority >= priority:  # equal priorities never preempt each other
        return False
    last = victim.last_evicted_at
    if (
        last is not None
        and cycle.now - last < cycle.config.cooldown
        and priority < CRITICAL_PRIORITY
    ):
        return False
    return effective_weight(victim, cycle.config, cycle.now) < priority


def give_way(
    cycle: CycleContext,
    reason: EvictReason,
    pool: VictimPool,
    allow: Callable[[JobView, Unit, Sequence[Unit]], bool] | None = None,
    may_try: Callable[[JobView], bool] | None = None,
) -> None:
    by_queue = _victims_by_queue(cycle)
    indexes: dict[tuple[str, int], VictimIndex] = {}
    failed: set[tuple[object, ...]] = set()
    for job in cycle.unplaced_in_order():
        spec = job.spec
        if spec.id in cycle.started or spec.id in cycle.blocked or job.nomination is not None:
            continue
        if spec.type is JobType.DEBUG or not spec.priority_class.may_preempt:
            continue
        key = (shape_key(job), spec.queue, spec.priority)
        if key in failed:
            continue
        if may_try is not None and not may_try(job):
            continue
        if cycle.eviction_budget <= 0 and cycle.evicted_gpu > 0:
            break
        group = (job.spec.queue, job.spec.priority)
        index = indexes.get(group)
        if index is None:
            index = indexes[group] = VictimIndex(
                [
                    unit
                    for victim in pool(job, by_queue)
                    if _eligible(cycle, job, victim)
                    for unit in victim_units(victim, cycle.config, cycle.now)
                ]
            )
        if not index.units:
            failed.add(key)
            continue
        veto = None if allow is None else (lambda unit, chosen, p=job: allow(p, unit, chosen))
        plan = find_plan(cycle.room, job.spec, index, cycle.evicted, veto)
        if plan is None:
            failed.add(key)
            continue
        _execute(cycle, job, plan, reason)


def _execute(cycle: CycleContext, job: JobView, plan: Plan, reason: EvictReason) -> None:
    pending: list[str] = []
    for unit in plan.units:
        if unit.gpu <= cycle.eviction_budget or cycle.evicted_gpu == 0:
            tasks = () if unit.whole else unit.tasks
            cycle.evict(Evict(unit.job.id, reason, job.id, tasks, unit.gpu), unit.job)
        else:
            pending.append(unit.job.id)
    victims = tuple(dict.fromkeys(unit.job.id for unit in plan.units))
    nomination = Nomination(plan.placement, victims, tuple(pending), cycle.now, reason.value)
    cycle.nominations.append(Nominate(job.id, nomination))
    cycle.block(job.id, plan.placement)
    if pending:
        cycle.wakeups.append(cycle.now + 1)


def continue_nominations(cycle: CycleContext) -> None:
    """Signal victims a nomination still waits for, as far as this cycle's budget allows."""
    nominated = [job for job in cycle.eligible if job.nomination is not None]
    for job in sorted(nominated, key=job_order):
        nomination = job.nomination
        if nomination is None or not nomination.pending_victims or job.id in cycle.started:
            continue
        if job.id not in cycle.blocked:
            continue  # the nomination was dropped this cycle
        still: list[str] = []
        reason = EvictReason(nomination.reason)
        for victim_id in nomination.pending_victims:
            victim = cycle.jobs.get(victim_id)
            if victim is None or victim.state is not JobState.RUNNING or is_protected(victim):
                continue
            if victim.id in cycle.evicted:
                continue
            gpu = victim.spec.gpu * len(victim.placement)
            if gpu <= cycle.eviction_budget or cycle.evicted_gpu == 0:
                cycle.evict(Evict(victim.id, reason, job.id, (), gpu), victim)
            else:
                still.append(victim.id)
        if tuple(still) != nomination.pending_victims:
            updated = Nomination(
                nomination.placement,
                nomination.victims,
                tuple(still),
                nomination.since,
                nomination.reason,
            )
            cycle.nominations.append(Nominate(job.id, updated))
        if still:
            cycle.wakeups.append(cycle.now + 1)
