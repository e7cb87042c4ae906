"""Phase 4, reclaim: across queues, take back lent room for a queue below its deserved share.

Reclaim follows shares, not priorities (DESIGN §4.1 step 1). For a preemptor P:
1. **borrowers alone** — if P's queue stays within its deserved share once P starts (a
   critical P: within its queue's capability): running jobs of other queues that are
   reclaimable and above their deserved share, whatever their priority;
2. **its own queue alone** — for a P that preempt left to this phase (borrowers first):
   lower-priority work of P's queue, as preempt would take it; the cheaper of 1 and 2 wins
   (least work lost, then fewest victims of P's own queue), and a lossless plan of 1 is
   taken at once;
3. **both kinds**, borrowers first, only when neither alone places P: its own queue's
   victims must then keep that queue within its deserved share (critical: its capability).

May: evict under those rules, graceful, only what lets P actually be placed; a victim queue
may lose a job while it is above its deserved share before that eviction (so its last victim
may take it below, as Volcano's proportion plugin does), never below its guarantee.
May not: take from a queue marked `reclaimable: false`, reclaim for a debug job, or take a
job whose effective weight escalated to the ceiling for a non-critical preemptor while that
job is expected to end before the preemptor's start SLO runs out (core/estimates.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from caldera.core.context import CycleContext
from caldera.core.decisions import EvictReason
from caldera.core.estimates import slo_deadline
from caldera.core.eviction import give_way, hopeless, search
from caldera.core.jobindex import GroupKey, group_key
from caldera.core.pools import VictimPools, freed_by, frees, over_capability
from caldera.core.shortcuts.searches import DEADLINE_WAKES
from caldera.core.snapshot import JobView
from caldera.core.usage import QueueUsage
from caldera.core.victims import Enough, Plan, Unit
from caldera.model import CRITICAL_PRIORITY, Resources

__all__ = ["borrowers_first", "may_reclaim", "reclaim"]


def _department_cap_binds(usage: QueueUsage, gang: Resources) -> bool:
    """Does only the department's capability stand in the way of `gang` (its queue's own
    fits)? Then victims among the department's teams free room under that same cap, so the
    preemptor may still reclaim from its siblings (`_department_frees`); a queue's own cap is
    freed only by its own victims (preempt)."""
    parent = usage.parent
    if parent is None or parent.queue.capability is None:
        return False
    own = usage.queue.capability
    return own is None or (usage.allocated + usage.promised + gang).fits_in(own)


def _department_frees(usage: QueueUsage, over: Resources) -> Enough:
    """Do the units of the teams of `usage`'s department free at least `over` (what the
    preemptor's gang takes the department beyond its capability)?"""
    assert usage.parent is not None
    teams = [child.queue.name for child in usage.parent.children]

    def enough(units: Sequence[Unit]) -> bool:
        freed = Resources()
        for team in teams:
            freed = freed + freed_by(units, team)
        return freed.gpu >= over.gpu and freed.cpu >= over.cpu and freed.memory >= over.memory

    return enough


def _cap_enough(usage: QueueUsage, gang: Resources, over: Resources | None) -> Enough | None:
    """What a plan's victims must free for a preemptor over a cap by `over`
    (`over_capability`; None: nothing): its own queue's victims for its queue's cap, the
    department's teams' for the department's."""
    if over is None:
        return None
    if _department_cap_binds(usage, gang):
        return _department_frees(usage, over)
    return frees(usage.queue.name, over)


def may_reclaim(cycle: CycleContext, job: JobView) -> bool:
    """May `job` take borrowed room back on its own? Its queue stays within its deserved
    share once it starts (a critical job: within its capability). A gang that only its
    department's capability stands in the way of may still reclaim: its siblings' victims
    free room under that cap (the plan must free it, `_cap_enough`)."""
    spec = job.spec
    usage = cycle.usage.get(spec.queue)
    if usage is None or not spec.may_preempt:
        return False
    gang = spec.gang_request
    if not usage.within_capability(gang) and not _department_cap_binds(usage, gang):
        return False
    if spec.priority >= CRITICAL_PRIORITY:
        return True
    return usage.may_take_back(gang)


def _others_borrow(cycle: CycleContext, queue: str) -> bool:
    """Does a reclaimable queue other than `queue` hold more than its deserved share, counting
    what it keeps once its signalled jobs leave?"""
    borrowing = cycle.usage_memo(
        "borrowing",
        lambda: {
            name
            for name, usage in cycle.usage.items()
            if usage.queue.reclaimable and usage.over_deserved(usage.kept)
        },
    )
    taker = cycle.usage.get(queue)
    if taker is None:
        return len(borrowing) > (queue in borrowing)
    return any(name != queue and cycle.usage[name].lends_to(taker) for name in borrowing)


def borrowers_first(cycle: CycleContext, job: JobView, key: GroupKey | None = None) -> bool:
    """Should `job` reclaim before it preempts its own queue's lower-priority work? (Kueue's
    candidate order: borrowers first.) The answer depends on the job's queue, gang and
    priority and on the queues' usage: kept per pending group (`key`, when the caller has it)
    until a usage changes."""
    answers: dict[GroupKey, bool] = cycle.usage_memo("borrowers_first answers", dict)
    if key is None:
        key = group_key(job.spec)  # its group: same gang, same class
    answer = answers.get(key)
    if answer is None:
        # (both only read the usages: the cheaper one first)
        answer = answers[key] = _others_borrow(cycle, key[0]) and may_reclaim(cycle, job)
    return answer


def _wake_when_slo_runs_out(cycle: CycleContext, job: JobView) -> None:
    """A non-critical preemptor that may reclaim while others borrow looks again just after
    its start SLO runs out: borrowers at the W_eff ceiling it waited for are fair game then
    (DESIGN §4.1). Asked on what only the queues' usage decides (not on whether such a
    borrower runs, which time changes), so that a failed search the memo settles asks the
    same (`FailedSearch.wake`)."""
    spec = job.spec
    if spec.priority >= CRITICAL_PRIORITY or not _others_borrow(cycle, spec.queue):
        return
    if not may_reclaim(cycle, job):
        return
    deadline = slo_deadline(spec, cycle.config)
    if deadline is None or deadline < cycle.now:
        return
    wake = math.nextafter(deadline, math.inf)
    wakes: dict[str, float] = cycle.memo(DEADLINE_WAKES, dict)
    wakes[job.id] = wake
    cycle.decided.wakeups.append(wake)


def reclaim(cycle: CycleContext) -> None:
    deferred: set[str] = cycle.memo("borrowers_first", set)

    def planner(job: JobView, pools: VictimPools) -> Plan | None:
        queue = job.spec.queue
        usage = cycle.usage[queue]
        gang = job.spec.gang_request
        over = over_capability(usage, gang)
        capped = _cap_enough(usage, gang, over)
        best = None
        _wake_when_slo_runs_out(cycle, job)
        if may_reclaim(cycle, job) and not pools.empty("borrowers", job):
            veto = pools.floor_veto(queue, job)
            if usage.parent is not None and veto.across and veto.siblings and capped is None:
                # The department's lent room comes home first (DESIGN §2 "Hierarchy"): other
                # departments alone, then siblings too. (Not when the department is at its
                # capability: only its own teams' victims free room under it.)
                veto.siblings = False
                best = search(cycle, job, pools.borrowers(job), veto)
                veto = pools.floor_veto(queue, job)
            if best is None:
                best = search(cycle, job, pools.borrowers(job), veto, capped)
            if best is not None and best.cost.lost == 0 and not best.cost.late:
                return best
        if job.id in deferred and not (hopeless(cycle, job) or pools.own_never_fits(job)):
            own = search(
                cycle, job, pools.own(job), enough=None if over is None else frees(queue, over)
            )
            if own is not None and (best is None or own.cost < best.cost):
                best = own
        if best is not None:
            return best
        if pools.empty("borrowers", job) or pools.empty("own", job):
            return None
        critical = job.spec.priority >= CRITICAL_PRIORITY

        def enough(units: Sequence[Unit]) -> bool:
            freed = freed_by(units, queue)
            if capped is not None and not capped(units):
                return False
            return critical or not usage.over_deserved(usage.holds(gang) - freed)

        return search(cycle, job, pools.combined(job), pools.floor_veto(queue, job), enough)

    give_way(cycle, EvictReason.RECLAIM, planner)
