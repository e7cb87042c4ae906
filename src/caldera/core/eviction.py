"""Shared driver of phases 3 (preempt) and 4 (reclaim): turn victim plans into evictions.

For each job allocate could not place, highest priority first: if it already holds a
nomination, keep signalling the victims its plan still needs (within the budget); otherwise
ask the phase for a plan, evict it (two-phase, graceful) and nominate the room for the
preemptor. Debug jobs (policy Never) never get here.

The candidates come from `VictimPools` (core/pools.py), a plan from the phase's planner over
them (core/plan_search.py), reclaim's floor from `FloorVeto` (core/floor.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from caldera.core.allocate import job_order
from caldera.core.backoff import back_off_ends
from caldera.core.config import PolicyConfig
from caldera.core.context import CycleContext
from caldera.core.decisions import Evict, EvictReason, Nominate
from caldera.core.defrag import packed_plan
from caldera.core.domains import never_fits
from caldera.core.jobindex import GroupKey, group_key
from caldera.core.packing import count_started, packing_load
from caldera.core.placement import place_job
from caldera.core.plan_search import find_plan
from caldera.core.pools import VictimPools
from caldera.core.room import TaskPlacement
from caldera.core.shortcuts.searches import DEADLINE_WAKES
from caldera.core.snapshot import JobView, Nomination, PendingVictim
from caldera.core.timing import next_signal, signal_times
from caldera.core.victims import (
    Enough,
    Plan,
    Veto,
    VictimIndex,
    is_protected,
)
from caldera.core.weight import Horizons, defends_against
from caldera.model import CRITICAL_PRIORITY, JobState, Resources

__all__ = [
    "NOMINATIONS_CONTINUED",
    "Planner",
    "continue_nominations",
    "fits_on_free_room",
    "give_way",
    "hopeless",
    "no_longer_a_victim",
]

NOMINATIONS_CONTINUED = "nominations continued"
"""The cycle memo of the holders `continue_nominations` went on with (read by quiet.py)."""


Planner = Callable[[JobView, "VictimPools"], Plan | None]
"""(preemptor, the phase's pools) -> the phase's best plan for it, or None."""


def _wait_for_a_cheaper_plan(cycle: CycleContext, job: JobView, plan: Plan) -> bool:
    """Every plan right now destroys work: a non-critical preemptor that has waited less
    than `lossy_patience` since it was submitted waits (backs off) for victims that can
    checkpoint or finish, rather than throw GPU-hours away (DESIGN goal 3)."""
    patience = cycle.config.lossy_patience
    if patience <= 0 or job.spec.priority >= CRITICAL_PRIORITY:
        return False
    if plan.cost.lost <= 0:
        return False
    return cycle.now - job.spec.submit < patience


def patience(cycle: CycleContext, job: JobView) -> float | None:
    """How long a critical preemptor can wait for its victims and still start within its
    SLO ("critical work starts fast"); None for other jobs or once the SLO is missed."""
    if job.spec.priority < CRITICAL_PRIORITY:
        return None
    slo = cycle.config.slo.get(job.spec.type.value)
    if slo is None:
        return None
    left = job.spec.submit + slo - cycle.now
    return left if left >= 0 else None


def hopeless(cycle: CycleContext, job: JobView) -> bool:
    """Would every victim search for `job` among its queue's lower-priority work fail, even
    taking all of it? A cheap count on the job index that saves building the candidates of
    a search that cannot succeed (`domains.never_fits`); False when it cannot tell."""
    spec = job.spec
    index = cycle.snapshot.job_index
    return never_fits(cycle.room, spec, index.lower_devices(spec.queue, spec.priority))


def give_way(
    cycle: CycleContext,
    reason: EvictReason,
    planner: Planner,
    may_try: Callable[[JobView, GroupKey], bool] | None = None,
) -> None:
    """Work through the waiting groups in rank order; a group whose head finds no plan is
    settled for this phase (its jobs would search the same victims for the same shape), and
    so is a group the phase leaves to another (`may_try` false)."""
    heads: list[tuple[tuple[int, float, str], int, int]] = []
    waiting = cycle.waiting
    phase = reason.value
    seen = cycle.waiting_seen.get(phase, 0)
    cycle.waiting_seen[phase] = len(waiting)
    for number in range(seen, len(waiting)):  # the groups allocate left since the last call
        (_, jobs), first = waiting[number]
        spec = jobs[first].spec
        if spec.may_preempt:
            heads.append((spec.rank, number, first))
    if not heads:
        return
    # In rank order: the heads sorted once, and the group-mates taken up after a head
    # (rarely: it started, holds room or a nomination, or found a plan) in a heap beside
    # them; the next head is the smaller of the two fronts. Popping a heap of every head was
    # a third of give_way's own time in the 10k burst.
    heads.sort()
    later: list[tuple[tuple[int, float, str], int, int]] = []
    ahead = 0
    pools: VictimPools | None = None  # made at the first search: most heads back off
    decided = cycle.decided
    started, blocked, usage, wakeups = decided.started, cycle.blocked, cycle.usage, decided.wakeups
    searches = cycle.caches.searches
    now, backoff = cycle.now, cycle.config.preempt_backoff
    count = len(heads)
    while ahead < count or later:
        if decided.evicted_gpu > 0 and cycle.eviction_budget <= 0:
            break
        if searches.until_decided and not cycle.undecided:
            break  # a quiet check that found a plan: the phases take over (core/shortcuts/quiet.py)
        if later and (ahead == count or later[0] < heads[ahead]):
            _, number, position = heapq.heappop(later)
        else:
            _, number, position = heads[ahead]
            ahead += 1
        group = waiting[number][0]
        (queue, priority, _shape), jobs = group
        job = jobs[position]
        if job.id in started or job.id in blocked or job.nomination is not None:
            if position + 1 < len(jobs):
                heapq.heappush(later, (jobs[position + 1].spec.rank, number, position + 1))
            continue
        if queue not in usage or (may_try is not None and not may_try(job, group[0])):
            continue  # the whole group asks the same of the same queue
        cycle.reached.setdefault(job.id, []).append(phase)
        ends = back_off_ends(job.preempt_failed_at, priority, now, backoff)
        if ends is not None:
            # The group's best job found no victims a moment ago; its group-mates would run
            # the same search. Back off until the timer, unless something else wakes us.
            wakeups.append(ends)
            continue
        if position + 1 < len(jobs):
            following: tuple[tuple[int, float, str], int, int] | None = (
                jobs[position + 1].spec.rank,
                number,
                position + 1,
            )
        else:
            following = None
        reserved = cycle.unreserve(job.id)  # its own reserved room counts as free for it
        if reserved and _start_on_free_room(cycle, job):
            continue
        key = (phase, group[0])
        if searches.known_failure(key, job, cycle.undecided, wakeups):
            plan = None  # failed before, and nothing since could change the answer (memo.py)
        else:
            if pools is None:
                pools = VictimPools(cycle)
            searches.order_mattered = False
            plan = planner(job, pools)
            if plan is None:
                if not searches.order_mattered:  # else time alone may change the answer
                    searches.record_failure(key, job, cycle.memo(DEADLINE_WAKES, dict))
            elif _wait_for_a_cheaper_plan(cycle, job, plan):
                # Not a failure: a victim's next checkpoint may make a lossless plan, with
                # nothing else changing, so this search is not settled (core/shortcuts/memo.py).
                plan = None
        if reserved:  # what its plan does not use stays out of others' reach this cycle
            cycle.reserve(job.id, reserved)
        if plan is None:
            decided.missed.add(job.id)
            if priority >= CRITICAL_PRIORITY:  # look again soon, even if nothing happens
                wakeups.append(now + backoff)
            continue
        _execute(cycle, job, plan)
        if following is not None:
            heapq.heappush(later, following)


def _start_on_free_room(cycle: CycleContext, job: JobView) -> bool:
    """A starving job whose reservation was released may fit now (room freed since allocate,
    e.g. another reservation's): it starts instead of taking victims."""
    placement = fits_on_free_room(cycle, job)
    if placement is None:
        return False
    cycle.start(job, placement)
    return True


def fits_on_free_room(cycle: CycleContext, job: JobView) -> tuple[TaskPlacement, ...] | None:
    """Where `job`'s gang, at its minimum, fits in the cycle's free room as it is, within its
    queue's capability; None if it does not."""
    spec = job.spec
    if not cycle.usage[spec.queue].within_capability(spec.gang_request):
        return None
    if not cycle.may_return(job):
        return None
    return place_job(cycle.room, spec, maximum=spec.min_available)


def search(
    cycle: CycleContext,
    job: JobView,
    index: VictimIndex,
    allow: Veto | None = None,
    enough: Enough | None = None,
) -> Plan | None:
    """One victim search for `job` among `index`'s units on the cycle's working room."""
    if not index.units:
        return None
    settled, packed = packed_plan(cycle, job, index, allow, enough, patience(cycle, job))
    if settled:  # `pack_with_victims` (core/defrag.py)
        return packed
    units = len(index.units)
    searches = cycle.caches.searches
    known, plan, order_mattered = searches.known_search(job, units, cycle.undecided)
    if not known:
        load, evicted = packing_load(cycle, job.spec), cycle.decided.evicted
        plan = find_plan(
            cycle.room, job.spec, index, evicted, allow, patience(cycle, job), enough, load
        )
        if plan is None and allow is not None and _retry_on_whole_nodes(cycle, job):
            clear = _on_clearable_nodes(cycle, index)
            if clear is not None:
                plan = find_plan(
                    cycle.room,
                    job.spec,
                    clear,
                    evicted,
                    allow,
                    patience(cycle, job),
                    enough,
                    load,
                )
        order_mattered = plan is None and allow is not None and allow.order_mattered
        searches.log_search(job, units, plan, order_mattered, cycle.undecided)
    if order_mattered:
        searches.order_mattered = True
    return plan


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


def _reason(holder: JobView, victim: JobView) -> EvictReason:
    """Inside the preemptor's queue: preempt; another queue's: reclaim."""
    return EvictReason.PREEMPT if victim.spec.queue == holder.spec.queue else EvictReason.RECLAIM


def _execute(cycle: CycleContext, job: JobView, plan: Plan) -> None:
    pending: list[PendingVictim] = []
    timed = signal_times(job, plan, cycle.config, cycle.now, cycle.snapshot.estimates)
    for victim, tasks in _by_victim(plan):
        gpu = victim.spec.gpu * (len(tasks) if tasks else len(victim.placement))
        at = timed.get(victim.id)
        if at is not None and at > cycle.now:  # a timed eviction: signalled later
            placements = tuple(victim.placement[i] for i in tasks)
            pending.append(PendingVictim(victim.id, placements, at))
            cycle.commit(victim, pending[-1])
        elif gpu <= cycle.eviction_budget or cycle.decided.evicted_gpu == 0:
            cycle.evict(Evict(victim.id, _reason(job, victim), job.id, tasks, gpu), victim)
        else:
            placements = tuple(victim.placement[i] for i in tasks)
            pending.append(PendingVictim(victim.id, placements))
            cycle.commit(victim, pending[-1])
    victims = tuple(dict.fromkeys(unit.job.id for unit in plan.units))
    reclaims = any(unit.queue != job.spec.queue for unit in plan.units)
    reason = EvictReason.RECLAIM if reclaims else EvictReason.PREEMPT
    nomination = Nomination(plan.placement, victims, tuple(pending), cycle.now, reason.value)
    cycle.decided.nominations.append(Nominate(job.id, nomination))
    cycle.claimed.update(victim.job for victim in pending)
    cycle.promise(job, 1)
    cycle.block(job.id, plan.placement)
    count_started(cycle, job.spec, plan.placement)
    if pending:
        cycle.decided.wakeups.append(next_signal(pending, cycle.now))


def no_longer_a_victim(
    victim: JobView | None,
    holder: JobView,
    config: PolicyConfig,
    now: float,
    evicted: set[str],
    horizons: Horizons | None = None,
) -> bool:
    """Has a pending victim of `holder`'s plan stopped being one at `now` (protected, evicted
    this cycle, defending itself by its weight, back in its cooldown)? Gone or not running is
    not this: it ended by itself."""
    if victim is None or victim.state is not JobState.RUNNING:
        return False
    if is_protected(victim) or victim.id in evicted:
        return True
    if defends_against(victim, holder, config, now, horizons):
        return True
    last = victim.last_evicted_at
    cooling = last is not None and now - last < config.cooldown
    return cooling and holder.spec.priority < CRITICAL_PRIORITY


def _below_the_floor(
    cycle: CycleContext, holder: JobView, pending: tuple[PendingVictim, ...]
) -> bool:
    """Would signalling a pending victim of another queue now take that queue from at or
    below its deserved share, or below its guarantee (reclaim's floor, `FloorVeto`)? Its
    queue may have shrunk since the plan was made (jobs finished, other victims signalled).
    As when the plan was made, the plan's victims before it count as gone and those after it
    as still there; so do other plans' pending victims (`QueueUsage.kept`)."""
    own = holder.spec.queue
    for number, entry in enumerate(pending):
        committed = cycle.committed_by.get(entry.job)
        if committed is None or committed[0] == own:
            continue
        queue = committed[0]
        later = Resources()
        for after in pending[number:]:
            other = cycle.committed_by.get(after.job)
            if other is not None and other[0] == queue:
                later = later + other[1]
        usage = cycle.usage[queue]
        before = usage.kept + later
        if not usage.may_lose(before, committed[1]):
            return True
        department = usage.top
        home = cycle.usage[own].top if own in cycle.usage else None
        if department is usage or department is home:
            continue
        # Across departments the victim's department keeps the same floor (DESIGN §2).
        later_there = Resources()
        for after in pending[number:]:
            other = cycle.committed_by.get(after.job)
            if other is not None and cycle.usage[other[0]].top is department:
                later_there = later_there + other[1]
        if not department.may_lose(department.tree_kept() + later_there, committed[1]):
            return True
    return False


def _over_its_share(
    cycle: CycleContext, holder: JobView, pending: tuple[PendingVictim, ...]
) -> bool:
    """Would signalling a pending victim of another queue now reclaim for a queue above its
    deserved share? Reclaim asks a non-critical preemptor's queue to stay within its share,
    with the preemptor's gang and less the plan's own-queue victims, when the plan is made
    (DESIGN §4.1); work that started in that queue since — a critical job, which asks no
    share — can break it before the budget lets the last victims go."""
    if holder.spec.priority >= CRITICAL_PRIORITY:
        return False
    own = holder.spec.queue
    leaving = Resources()
    reclaims = False
    for entry in pending:
        committed = cycle.committed_by.get(entry.job)
        if committed is None:
            continue
        if committed[0] == own:
            leaving = leaving + committed[1]
        else:
            reclaims = True
    if not reclaims:
        return False
    usage = cycle.usage[own]  # the holder's gang is in `promised`
    if not usage.over_deserved(usage.holds(Resources()) - leaving):
        return False
    parent = usage.parent  # a team may take its department's lent room home (§2)
    return parent is None or parent.over_deserved(parent.tree_holds(Resources()) - leaving)


def continue_nominations(cycle: CycleContext) -> None:
    """Signal victims a nomination still waits for, as far as this cycle's budget allows —
    in its holder's pass: a non-critical plan's after the non-critical allocate, so that what
    that pass started in the holder's queue counts when its share is checked (B19). Each
    nomination goes on once a cycle."""
    continued: set[str] = cycle.memo(NOMINATIONS_CONTINUED, set)
    eligible = {key[0] for key, _ in cycle.eligible_groups}
    nominated = [
        job
        for job in cycle.snapshot.job_index.nominated.values()
        if job.spec.queue in eligible
        and job.id not in continued
        and cycle.in_pass(group_key(job.spec))
    ]
    continued.update(job.id for job in nominated)
    horizons = cycle.snapshot.job_index.weight_horizons
    args = (cycle.config, cycle.now, cycle.decided.evicted, horizons)
    for job in sorted(nominated, key=job_order):
        nomination = job.nomination
        if nomination is None or not nomination.pending or job.id in cycle.decided.started:
            continue
        if job.id not in cycle.blocked:
            continue  # the nomination was dropped this cycle
        still: list[PendingVictim] = []
        ended = False  # a pending victim ended by itself (core/timing.py: waited for)
        if (
            any(no_longer_a_victim(cycle.jobs.get(p.job), job, *args) for p in nomination.pending)
            or _below_the_floor(cycle, job, nomination.pending)
            or _over_its_share(cycle, job, nomination.pending)
        ):
            # The plan no longer holds (a victim gained protection or was evicted since, its
            # queue no longer lends what the plan takes, or the preemptor's own queue is no
            # longer within its share): give the promise up and plan afresh in a later cycle.
            cycle.promise(job, -1)
            cycle.decided.nominations.append(Nominate(job.id, None))
            cycle.decided.notes.append(f"{job.id}: a pending victim changed, re-planning")
            for pending in nomination.pending:
                cycle.uncommit(pending.job)
            continue
        for pending in nomination.pending:
            victim = cycle.jobs.get(pending.job)
            if victim is None or victim.state is not JobState.RUNNING:
                ended = True
                continue  # gone by itself: its room is free already
            if pending.at is not None and pending.at > cycle.now:
                still.append(pending)  # a timed eviction, not due yet
                continue
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
            if gpu <= cycle.eviction_budget or cycle.decided.evicted_gpu == 0:
                cycle.uncommit(victim.id)  # from committed to releasing: its queue keeps as much
                cycle.evict(Evict(victim.id, _reason(job, victim), job.id, tasks, gpu), victim)
            else:
                still.append(pending)
        if len(still) != len(nomination.pending):  # (else `still` is every one of them)
            for pending in nomination.pending:
                if pending not in still:
                    cycle.uncommit(pending.job)  # signalled, gone by itself, or left out
        if tuple(still) != nomination.pending:
            updated = Nomination(
                nomination.placement,
                nomination.victims,
                tuple(still),
                nomination.since,
                nomination.reason,
            )
            cycle.decided.nominations.append(Nominate(job.id, updated))
        if still:
            cycle.decided.wakeups.append(next_signal(still, cycle.now))
        elif ended:
            # Allocate ran before this cycle knew the plan waits for nobody: the holder
            # starts in the next cycle, not at a moment its last victim no longer needs.
            cycle.decided.wakeups.append(cycle.now + 1)


def _retry_on_whole_nodes(cycle: CycleContext, job: JobView) -> bool:
    """Does a failed reclaim search for `job` search again on clearable nodes
    (`PolicyConfig.reclaim_whole_nodes`)? Only for gangs of whole GPUs: a single task needs one
    node, and the search already tries each."""
    spec = job.spec
    return cycle.config.reclaim_whole_nodes and spec.min_available > 1 and spec.whole_gpus > 0


def _on_clearable_nodes(cycle: CycleContext, index: VictimIndex) -> VictimIndex | None:
    """The units of `index` on nodes its candidates could clear whole — every GPU there free
    or held by a candidate — or None when that leaves none out or nothing. Reclaim's floor lets
    a queue lose room only while it is above its deserved share; a search in victim order
    spends that allowance on cheap victims beside work that never leaves, and a gang of whole
    nodes then finds no plan although enough nodes hold nothing but borrowed work."""
    room = cycle.room
    held = index.devices(cycle.decided.evicted)
    nodes = {
        node for node, count in held.items() if room.whole[node] + count >= room.nodes[node].gpus
    }
    units = [unit for unit in index.units if all(t.node in nodes for t in unit.placements)]
    if not units or len(units) == len(index.units):
        return None
    return VictimIndex(units, index.first)
