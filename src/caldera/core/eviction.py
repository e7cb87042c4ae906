"""Shared driver of phases 3 (preempt) and 4 (reclaim): turn victim plans into evictions.

For each job allocate could not place, highest priority first: if it already holds a
nomination, keep signalling the victims its plan still needs (within the budget); otherwise
look for a plan among the victims the phase allows, evict it (two-phase, graceful) and
nominate the room for the preemptor. Debug jobs (policy Never) never get here.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Mapping, Sequence

from caldera.core.allocate import job_order
from caldera.core.context import CycleContext, QueueUsage
from caldera.core.decisions import Evict, EvictReason, Nominate
from caldera.core.snapshot import JobView, Nomination, PendingVictim
from caldera.core.victims import Plan, Unit, VictimIndex, find_plan, is_protected, victim_units
from caldera.core.weight import effective_weight
from caldera.model import CRITICAL_PRIORITY, JobState, Resources

__all__ = ["VictimPool", "VictimsByQueue", "continue_nominations", "give_way", "lower_priority"]

VictimsByQueue = dict[str, dict[int, dict[str, JobView]]]
"""Running jobs that could ever be victims: queue -> base priority -> id -> job."""

VictimPool = Callable[[JobView, VictimsByQueue], list[Collection[JobView]]]
"""(preemptor, victims) -> the groups of running jobs this phase may consider for it."""


def lower_priority(
    by_priority: dict[int, dict[str, JobView]], priority: int
) -> list[Collection[JobView]]:
    """The groups strictly below `priority`: equal priorities never preempt each other."""
    return [jobs.values() for value, jobs in by_priority.items() if value < priority]


def _wait_for_a_cheaper_plan(cycle: CycleContext, job: JobView, plan: Plan) -> bool:
    """Every plan right now destroys work: a non-critical preemptor that has waited less
    than `lossy_patience` since it was submitted waits (backs off) for victims that can
    checkpoint or finish, rather than throw GPU-hours away (DESIGN goal 3)."""
    patience = cycle.config.lossy_patience
    if patience <= 0 or job.spec.priority >= CRITICAL_PRIORITY:
        return False
    if not any(unit.lost > 0 for unit in plan.units):
        return False
    return cycle.now - job.spec.submit < patience


def _patience(cycle: CycleContext, job: JobView) -> float | None:
    """How long a critical preemptor can wait for its victims and still start within its
    SLO ("critical work starts fast"); None for other jobs or once the SLO is missed."""
    if job.spec.priority < CRITICAL_PRIORITY:
        return None
    slo = cycle.config.slo.get(job.spec.type.value)
    if slo is None:
        return None
    left = job.spec.submit + slo - cycle.now
    return left if left >= 0 else None


def _over_capability(usage: QueueUsage, extra: Resources) -> Resources | None:
    """By how much `extra` would take the queue over its capability (None: it would not)."""
    cap = usage.queue.capability
    if cap is None or usage.within_capability(extra):
        return None
    total = usage.allocated + usage.promised + extra
    return Resources(
        *(
            max(held - limit, 0) if limit > 0 else 0
            for held, limit in (
                (total.gpu, cap.gpu),
                (total.cpu, cap.cpu),
                (total.memory, cap.memory),
            )
        )
    )


def _frees(queue: str, need: Resources) -> Callable[[Sequence[Unit]], bool]:
    """Do victims of `queue` among these units free at least `need`?"""

    def enough(units: Sequence[Unit]) -> bool:
        freed = Resources()
        for unit in units:
            if unit.job.spec.queue == queue:
                freed = freed + unit.job.spec.task_request.scaled(len(unit.tasks))
        return freed.gpu >= need.gpu and freed.cpu >= need.cpu and freed.memory >= need.memory

    return enough


def _eligible(cycle: CycleContext, preemptor: JobView, victim: JobView) -> bool:
    """The preemptor-dependent rules (DESIGN §4.1 step 1, §4.5)."""
    if victim.id in cycle.evicted or victim.id in cycle.claimed:
        return False  # signalled this cycle, or promised to another preemptor's plan
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
    weights: dict[str, float] = cycle.memo("weights", dict)
    weight = weights.get(victim.id)
    if weight is None:
        weight = weights[victim.id] = effective_weight(victim, cycle.config, cycle.now)
    return weight < priority


def give_way(
    cycle: CycleContext,
    reason: EvictReason,
    pool: VictimPool,
    allow: Callable[[JobView, Unit, Mapping[str, int]], bool] | None = None,
    may_try: Callable[[JobView], bool] | None = None,
    frees_quota: bool = False,
) -> None:
    """Work through the waiting groups in rank order; a group whose head finds no plan is
    settled for this phase (its jobs would search the same victims for the same shape).
    `frees_quota`: the pool holds the preemptor's own queue, so its victims can make room
    under that queue's capability too."""
    heads: list[tuple[tuple[int, float, str], int, int]] = []
    groups = [group for group, _ in cycle.waiting]
    seen = cycle.waiting_seen.get(reason.value, 0)
    cycle.waiting_seen[reason.value] = len(cycle.waiting)
    for number, ((_, jobs), first) in enumerate(cycle.waiting):
        if number >= seen and jobs[first].spec.may_preempt:
            heads.append((jobs[first].spec.rank, number, first))
    if not heads:
        return
    heapq.heapify(heads)
    by_queue = cycle.snapshot.job_index.victims
    units_of: dict[str, list[Unit]] = cycle.memo("victim_units", dict)
    indexes: dict[tuple[str, int], VictimIndex] = {}
    started, blocked = cycle.started, cycle.blocked
    while heads:
        if cycle.eviction_budget <= 0 and cycle.evicted_gpu > 0:
            break
        _, number, position = heapq.heappop(heads)
        (queue, priority, _shape), jobs = groups[number]
        job = jobs[position]
        if position + 1 < len(jobs):
            following = (jobs[position + 1].spec.rank, number, position + 1)
        else:
            following = None
        if job.id in started or job.id in blocked or job.nomination is not None:
            if following is not None:
                heapq.heappush(heads, following)
            continue
        if may_try is not None and not may_try(job):
            continue  # the whole group asks the same of the same queue
        usage = cycle.usage.get(queue)
        if usage is None:
            continue
        # Quota its own queue's victims must free for it to stay within the capability
        # (jobs of its queue may also have started, or been promised room, since allocate).
        over = _over_capability(usage, job.spec.gang_request)
        enough = None
        if over is not None:
            if not frees_quota:
                continue  # other queues' victims free room, never this queue's quota
            enough = _frees(queue, over)
        failed_at = job.preempt_failed_at
        if (
            failed_at is not None
            and priority < CRITICAL_PRIORITY
            and cycle.now - failed_at < cycle.config.preempt_backoff
        ):
            # The group's best job found no victims a moment ago; its group-mates would run
            # the same search. Back off until the timer, unless something else wakes us.
            cycle.wakeups.append(failed_at + cycle.config.preempt_backoff)
            continue
        group = (queue, priority)
        index = indexes.get(group)
        if index is None:
            units: list[Unit] = []
            for victims in pool(job, by_queue):
                for victim in victims:
                    if _eligible(cycle, job, victim):
                        if victim.id not in units_of:
                            weights: dict[str, float] = cycle.memo("weights", dict)
                            weight = weights.get(victim.id)
                            units_of[victim.id] = victim_units(
                                victim, cycle.config, cycle.now, weight
                            )
                        units.extend(units_of[victim.id])
            index = indexes[group] = VictimIndex(units)
        veto = None if allow is None else (lambda unit, taken, p=job: allow(p, unit, taken))
        plan = None
        if index.units:
            plan = find_plan(
                cycle.room, job.spec, index, cycle.evicted, veto, _patience(cycle, job), enough
            )
        if plan is not None and _wait_for_a_cheaper_plan(cycle, job, plan):
            plan = None
        if plan is None:
            cycle.missed.add(job.id)
            if priority >= CRITICAL_PRIORITY:  # look again soon, even if nothing happens
                cycle.wakeups.append(cycle.now + cycle.config.preempt_backoff)
            continue
        _execute(cycle, job, plan, reason)
        if following is not None:
            heapq.heappush(heads, following)


def _by_victim(plan: Plan) -> list[tuple[JobView, tuple[int, ...]]]:
    """The plan's units as one eviction per job: its tasks, () for the whole gang."""
    tasks: dict[str, tuple[JobView, set[int] | None]] = {}
    for unit in plan.units:
        victim, taken = tasks.get(unit.job.id, (unit.job, set()))
        if unit.whole or taken is None:
            tasks[unit.job.id] = (victim, None)
        else:
            tasks[unit.job.id] = (victim, taken | set(unit.tasks))
    return [
        (victim, () if taken is None else tuple(sorted(taken))) for victim, taken in tasks.values()
    ]


def _execute(cycle: CycleContext, job: JobView, plan: Plan, reason: EvictReason) -> None:
    pending: list[PendingVictim] = []
    for victim, tasks in _by_victim(plan):
        gpu = victim.spec.gpu * (len(tasks) if tasks else len(victim.placement))
        if gpu <= cycle.eviction_budget or cycle.evicted_gpu == 0:
            cycle.evict(Evict(victim.id, reason, job.id, tasks, gpu), victim)
        else:
            placements = tuple(victim.placement[i] for i in tasks)
            pending.append(PendingVictim(victim.id, placements))
    victims = tuple(dict.fromkeys(unit.job.id for unit in plan.units))
    nomination = Nomination(plan.placement, victims, tuple(pending), cycle.now, reason.value)
    cycle.nominations.append(Nominate(job.id, nomination))
    cycle.claimed.update(victim.job for victim in pending)
    cycle.promise(job, 1)
    cycle.block(job.id, plan.placement)
    if pending:
        cycle.wakeups.append(cycle.now + 1)


def _no_longer_a_victim(cycle: CycleContext, holder: JobView, pending: PendingVictim) -> bool:
    victim = cycle.jobs.get(pending.job)
    if victim is None or victim.state is not JobState.RUNNING:
        return False
    if is_protected(victim) or victim.id in cycle.evicted:
        return True
    last = victim.last_evicted_at
    return (
        last is not None
        and cycle.now - last < cycle.config.cooldown
        and holder.spec.priority < CRITICAL_PRIORITY
    )


def continue_nominations(cycle: CycleContext) -> None:
    """Signal victims a nomination still waits for, as far as this cycle's budget allows."""
    eligible = {key[0] for key, _ in cycle.eligible_groups}
    nominated = [
        job for job in cycle.snapshot.job_index.nominated.values() if job.spec.queue in eligible
    ]
    for job in sorted(nominated, key=job_order):
        nomination = job.nomination
        if nomination is None or not nomination.pending or job.id in cycle.started:
            continue
        if job.id not in cycle.blocked:
            continue  # the nomination was dropped this cycle
        still: list[PendingVictim] = []
        reason = EvictReason(nomination.reason)
        if any(_no_longer_a_victim(cycle, job, pending) for pending in nomination.pending):
            # The plan no longer holds (a victim gained protection or was evicted since):
            # give the promise up and plan afresh in a later cycle.
            cycle.promise(job, -1)
            cycle.nominations.append(Nominate(job.id, None))
            cycle.notes.append(f"{job.id}: a pending victim changed, re-planning")
            continue
        for pending in nomination.pending:
            victim = cycle.jobs.get(pending.job)
            if victim is None or victim.state is not JobState.RUNNING:
                continue  # gone by itself: its room is free already
            if pending.tasks:
                wanted = set(pending.tasks)
                tasks = tuple(i for i, t in enumerate(victim.placement) if t in wanted)
                if not tasks:
                    continue  # those tasks are gone already
                if len(victim.placement) - len(tasks) < victim.spec.min_available:
                    continue  # never cut a gang below its minimum
            else:
                tasks = ()
            count = len(tasks) if tasks else len(victim.placement)
            gpu = victim.spec.gpu * count
            if gpu <= cycle.eviction_budget or cycle.evicted_gpu == 0:
                cycle.evict(Evict(victim.id, reason, job.id, tasks, gpu), victim)
            else:
                still.append(pending)
        if tuple(still) != nomination.pending:
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
