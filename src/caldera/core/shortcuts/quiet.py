"""Quiet cycles: a cycle that can only decide nothing, worked out without running the phases.

Under a backlog most cycles decide nothing: a timer ends some waiting head's back-off, or a
submission joins a group that already waits, and every phase walks every pending group to
find that nothing can start, nobody can give way and no queue changes its waiting mode. When
cycle C0 (at t0) decided nothing, `remember` keeps what it saw in its memo (`QuietCycle`);
when the next cycle C1 (at t1) sees the same state, `replay` works out from that record and
C1's snapshot exactly what the phases would decide — no starts, evictions, nominations, holds,
releases or waiting-mode changes; the same back-off misses, wake-up, memo entries and memo
hits — running only the victim searches the memo does not settle; or it says it cannot
(None), and the phases run.

What C0 must be (`remember`): a cycle of a policy that remembers quiet cycles
(`Policy.remembers_quiet_cycles`: `CALDERA`, whose phases the argument below reads),
explaining nothing, no queue with time windows, nothing decided and no note. A nominated
preemptor may still wait for victims timed to their checkpoints (core/timing.py): C0 signalled
none of them, and the record keeps which it went on with (`signalling`).

Why C1 then decides what C0 did, when `replay` answers:

1. The memo's stamp holds (core/shortcuts/memo.py): the same free room, the same running, releasing
   and nominated jobs (hence the same queue usage and victims), settings, queues and nodes;
   and the same waiting modes. The pending groups are the same, and each eligible group's
   first job without a nomination — its head — is the same job; later jobs of a group are
   never tried (a group is settled at its head's failure). Every job of a group has the same
   queue, priority, type and shape, so enqueue admits the same groups.
2. Time alone changes a phase's answer only at these points, and none lies in (t0, t1]: a
   nomination going stale (`nomination_timeout`, allocate.py; checked for every nomination),
   a large head starting to starve (`starving_from`, reservation.py), a waiting mode's timeout
   (throttle.py), a memo entry's `until`, a pending victim's timed signal (`PendingVictim.at`,
   continue_nominations), a pending victim of the holder's own queue whose effective weight
   reaches the holder's priority (`weight.defends_against`; the rest of `no_longer_a_victim`
   reads state the stamp holds, and a cooldown only ends with time: C0 found none).
   Back-offs are worked out at t1 (4). Nothing else in enqueue, allocate, backfill or
   throttle reads the clock, and a nomination still waiting changes nothing else: its
   victims are committed alike on the same state, its floor and share checks read the
   queues' usage alone, and its next signal is the same wake-up.
3. The room evolves alike. allocate blocks the free part of the nominations' room (`blocked`),
   reserves room for the same starving heads (the same set, on the same room: `reserved`)
   and starts nothing — every head failed on that room in C0. In preempt and reclaim a head
   that searches hands its reservation back and takes it again (the same free devices), and
   a search that fails or a memo hit changes nothing, so each head sees the room allocate left
   (critical heads, in their own pass, without the reservations), whichever heads searched.
   backfill grows nothing on it.
4. In give_way a head reaches the back-off check in the same phases as in C0 (`phases`:
   preempt's `may_try` reads only the queues' usage; reclaim asks everyone). There it backs
   off (a non-critical head whose last miss is less than `preempt_backoff` old: a wake-up at
   the end) or searches. A head that searches is *settled* when, in each phase it searches
   in, it does not fit on its own reserved room (`fits_alone`, worked out in C0 on the same
   room) and hits the memo — the entry for (phase, its group) names it and lasts beyond t1,
   exactly `known_failure`, so the phases would skip the search too, count a hit and record
   nothing. It misses again; a critical miss asks for a wake-up one back-off later.
5. A head that searches and is not settled — its last search was before something changed,
   so the memo forgot it — searches for real: `_search_unsettled` rebuilds the working room
   of 3 from the record (C0's `blocked` and `reserved` parts, taken again exactly) on a fresh
   `CycleContext` of C1 and runs preempt and reclaim over those heads alone, critical ones
   first without the reservations, as the phases would. Nothing else in the cycle depends on
   which heads searched (3), so if every such search fails, its misses, wake-ups, hits and
   new memo entries are the phases'; if one finds a plan or fits, the check stops there
   (what follows a decision is not used) and the phases run instead.
   They run the same searches first, on the same state and in the same order, up to the one
   that found the plan: those searches' answers are handed to them (`SearchCache.known`) and
   taken in order while the cycle has decided nothing — each must name the same preemptor
   and pool size, or the rest is dropped. Only `find_plan` is skipped: the phases still
   build the same victim pools at the same points, which later heads read — from the
   running jobs' effective weights and victim units the check worked out, functions of the
   snapshot alone (`SNAPSHOT_MEMOS`).
6. throttle: the waiting modes are the same and none ends (their jobs still wait, before
   the timeout), and no waiting large group holds a large job not throttled before — a
   submission since C0 may have added one, so those groups are scanned as throttle does.

The decisions are C0's with the clock at t1: the heads that searched as `preempt_misses`,
the earliest wake-up, the memo entries that last beyond t1 (with those the searches of 5
add) and the hits, and the same record, now at t1, so quiet cycles chain.
tests/sim/test_memo.py checks every answered cycle against the phases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple

from caldera.core.allocate import nomination_stale
from caldera.core.backoff import back_off_ends
from caldera.core.config import PolicyConfig
from caldera.core.context import CycleContext
from caldera.core.decisions import Decisions
from caldera.core.estimates import starving_from
from caldera.core.eviction import NOMINATIONS_CONTINUED, fits_on_free_room
from caldera.core.jobindex import GroupKey
from caldera.core.pools import SNAPSHOT_MEMOS
from caldera.core.preempt import preempt
from caldera.core.reclaim import reclaim
from caldera.core.reservation import LARGE
from caldera.core.room import TaskPlacement
from caldera.core.shortcuts.memo import FailedSearch, SearchKey, SearchMemo, Stamp
from caldera.core.shortcuts.searches import Handover
from caldera.core.snapshot import JobView, Snapshot, Throttle
from caldera.core.throttle import may_throttle, waiting_mode_ends
from caldera.core.timing import next_signal
from caldera.core.weight import defends_against
from caldera.model import CRITICAL_PRIORITY, JobState

__all__ = ["QuietCycle", "QuietHead", "remember", "replay"]

Held = tuple[tuple[str, tuple[TaskPlacement, ...]], ...]
"""Room a cycle kept for jobs: (job, the parts it took) in the order they were taken."""


class QuietHead(NamedTuple):
    """An eligible pending group as a quiet cycle saw it. A named tuple, not a frozen
    dataclass: every cycle that decides nothing records one per eligible group, and a tuple is
    made in a fraction of the time."""

    key: GroupKey
    position: int  # its first job without a nomination (the jobs before it hold one)
    job: str | None  # that job, the group's head; None: every job holds a nomination
    phases: tuple[str, ...] = ()  # give_way phases whose back-off check the head reached
    # It holds reserved room and, that room handed back, fits on the free room: it starts
    # in any phase it searches in.
    fits_alone: bool = False


@dataclass(frozen=True)
class QuietCycle:
    """What a cycle that decided nothing saw: enough to answer the next the same way."""

    at: float
    groups: frozenset[GroupKey]  # every pending group
    heads: tuple[QuietHead, ...]  # every eligible one
    throttles: Mapping[str, Throttle]
    blocked: Held  # the free part of nominations' room, blocked by allocate
    reserved: Held  # the room reserved for starving large jobs
    signalling: tuple[str, ...] = ()  # nominated preemptors whose timed victims it waited for

    def moved_to(self, now: float) -> QuietCycle:
        """The same record at `now`, for the next cycle of a quiet chain (made directly:
        `dataclasses.replace` costs several times more, once per quiet cycle)."""
        return QuietCycle(
            now,
            self.groups,
            self.heads,
            self.throttles,
            self.blocked,
            self.reserved,
            self.signalling,
        )


def remember(cycle: CycleContext, decisions: Decisions) -> Decisions:
    """`decisions` with a `QuietCycle` in its memo when the cycle decided nothing and the next
    may be answered from it (the module docstring). Call inside the cycle's scratch room,
    after every phase of `CALDERA`, with nothing to explain."""
    memo = decisions.memo
    if memo is None or not decisions.empty or decisions.notes or not _may_remember(cycle):
        return decisions
    waiting = {group[0]: position for group, position in cycle.waiting}
    heads = tuple(
        _head(cycle, key, jobs, waiting.get(key, len(jobs))) for key, jobs in cycle.eligible_groups
    )
    snapshot = cycle.snapshot
    nominated = snapshot.job_index.nominated
    continued: set[str] = cycle.memo(NOMINATIONS_CONTINUED, set)
    record = QuietCycle(
        cycle.now,
        frozenset(snapshot.job_index.pending),
        heads,
        MappingProxyType(dict(snapshot.throttles)),
        tuple((job, tuple(parts)) for job, parts in cycle.blocked.items()),
        tuple((job, tuple(parts)) for job, parts in cycle.reservations.items()),
        tuple(
            job
            for job in sorted(continued)
            if (view := nominated.get(job)) is not None
            and view.nomination is not None
            and view.nomination.pending
        ),
    )
    return replace(decisions, memo=replace(memo, quiet=record))


def _may_remember(cycle: CycleContext) -> bool:
    """No time windows (their edges hold and release jobs)."""
    return not any(queue.time_windows for queue in cycle.snapshot.queues.values())


def _head(cycle: CycleContext, key: GroupKey, jobs: Sequence[JobView], position: int) -> QuietHead:
    if position >= len(jobs):
        return _new(QuietHead, (key, position, None, (), False))
    job = jobs[position]
    phases = tuple(cycle.reached.get(job.id, ()))
    return _new(QuietHead, (key, position, job.id, phases, _fits_alone(cycle, job)))


_new = tuple.__new__  # a named tuple's own constructor is a Python-level call


def _fits_alone(cycle: CycleContext, job: JobView) -> bool:
    """Would a head holding reserved room fit once it hands that room back, as it does in
    give_way? The room here is the one every give_way phase saw (module docstring, 3)."""
    if not cycle.reservations.get(job.id):
        return False
    reserved = cycle.unreserve(job.id)
    fits = fits_on_free_room(cycle, job) is not None
    cycle.reserve(job.id, reserved)
    return fits


@dataclass
class _Tally:
    """What the heads' back-off checks give (module docstring, 4)."""

    wakeups: list[float]
    misses: set[str] = field(default_factory=set)
    hits: int = 0
    unsettled: list[tuple[QuietHead, list[JobView]]] = field(default_factory=list)


def replay(snapshot: Snapshot) -> Decisions | Handover | None:
    """The decisions of `CALDERA` on `snapshot`, from the last cycle's record, when that
    cycle decided nothing and nothing it relied on changed; else the phases must run: None,
    or what they can start from: the victim searches they will run first, already run on
    the same state, and the victims' weights and units (5)."""
    memo = snapshot.memo
    if memo is None or memo.quiet is None or snapshot.explain:
        return None
    record = memo.quiet
    stamp = Stamp.of(
        snapshot.free_room, snapshot.job_index, snapshot.config, snapshot.queues, snapshot.nodes
    )
    if not memo.stamp.holds_for(stamp) or snapshot.job_index.pending.keys() != record.groups:
        return None
    wakeups = _waiting_modes_hold(snapshot, record)
    if (
        wakeups is None
        or not _nominations_hold(snapshot)
        or not _signals_wait(snapshot, record, wakeups)
    ):
        return None
    now = snapshot.now
    failed = {key: entry for key, entry in memo.failed.items() if now < entry.until}
    tally = _back_off_checks(snapshot, record, failed, _Tally(wakeups))
    if tally is None:
        return None
    if tally.unsettled:
        return _search_unsettled(snapshot, record, tally)
    later = [t for t in tally.wakeups if t > now]
    return Decisions(
        preempt_misses=tuple(sorted(tally.misses)),
        wakeup=min(later) if later else None,
        memo=SearchMemo(
            stamp, MappingProxyType(failed), tally.hits, record.moved_to(now), replayed=True
        ),
    )


def _waiting_modes_hold(snapshot: Snapshot, record: QuietCycle) -> list[float] | None:
    """The same waiting modes, none ending now (throttle.py): their timeouts as wake-ups."""
    throttles = snapshot.throttles
    if len(throttles) != len(record.throttles) or dict(throttles) != dict(record.throttles):
        return None
    config, views = snapshot.config, snapshot.job_index.views
    wakeups: list[float] = []
    for waiting in throttles.values():
        if waiting_mode_ends(waiting, views.get(waiting.job), config, snapshot.now) is not None:
            return None
        wakeups.append(waiting.since + config.throttle_timeout)
    return wakeups


def _nominations_hold(snapshot: Snapshot) -> bool:
    """No nomination may have gone stale (allocate.py drops a stale one)."""
    config, now = snapshot.config, snapshot.now
    return not any(
        job.nomination is not None and nomination_stale(job.nomination, config, now)
        for job in snapshot.job_index.nominated.values()
    )


def _signals_wait(snapshot: Snapshot, record: QuietCycle, wakeups: list[float]) -> bool:
    """No victim the record's nominations wait for is due or no longer a victim (module
    docstring, 2): their next signals as wake-ups, as continue_nominations asks."""
    views, config, now = snapshot.job_index.views, snapshot.config, snapshot.now
    nominated, horizons = snapshot.job_index.nominated, snapshot.job_index.weight_horizons
    for job_id in record.signalling:
        holder = nominated.get(job_id)
        nomination = holder.nomination if holder is not None else None
        if holder is None or nomination is None or not nomination.pending:
            return False
        for pending in nomination.pending:
            victim = views.get(pending.job)
            if pending.at is None or pending.at <= now:
                return False  # due now
            if victim is None or victim.state is not JobState.RUNNING:
                return False  # ended (C0 saw every one running, and the stamp holds)
            if defends_against(victim, holder, config, now, horizons):
                return False  # (the rest of no_longer_a_victim: the same state, C0's answer)
        wakeups.append(next_signal(nomination.pending, now))
    return True


def _first_waiting(jobs: Sequence[JobView]) -> int:
    """The position of a group's first job without a nomination (allocate's waiting head)."""
    position = 0
    while position < len(jobs) and jobs[position].nomination is not None:
        position += 1
    return position


def _back_off_checks(
    snapshot: Snapshot,
    record: QuietCycle,
    failed: Mapping[SearchKey, FailedSearch],
    tally: _Tally,
) -> _Tally | None:
    """Each head's back-off checks at `now` (module docstring, 4): settled heads' misses,
    hits and wake-ups, and the heads left to search; None if a head changed, a large head
    starts to starve or would throttle, or a head would start on its own reserved room."""
    pending = snapshot.job_index.pending
    config, now = snapshot.config, snapshot.now
    backoff = config.preempt_backoff
    for head in record.heads:
        jobs = pending[head.key]
        # (most groups' first job holds no nomination)
        position = _first_waiting(jobs) if jobs[0].nomination is not None else 0
        job = jobs[position] if position < len(jobs) else None
        if position != head.position or (job.id if job is not None else None) != head.job:
            return None
        if job is None:
            continue
        priority = head.key[1]
        if priority == LARGE and (
            _starts_to_starve(job, config, record.at, now)
            or (config.throttle and _would_throttle(snapshot, head, jobs))
        ):
            return None
        ends = back_off_ends(job.preempt_failed_at, priority, now, backoff)
        if ends is not None:
            # Backing off: the same in every phase it reaches (most heads of a backlog, every
            # quiet cycle), so one wake-up stands for all of them.
            if head.phases:
                tally.wakeups.append(ends)
            continue
        if not _check_head(head, jobs, failed, config, now, tally):
            return None
    return tally


def _check_head(
    head: QuietHead,
    jobs: list[JobView],
    failed: Mapping[SearchKey, FailedSearch],
    config: PolicyConfig,
    now: float,
    tally: _Tally,
) -> bool:
    """One head that does not back off (`_back_off_checks` answers those) through the phases
    whose back-off check it reaches: settled by the memo, left to search, or — False — it
    would start."""
    job = jobs[head.position]
    critical = head.key[1] >= CRITICAL_PRIORITY
    backoff = config.preempt_backoff
    wakeups: list[float] = []
    hits = 0
    for phase in head.phases:
        if head.fits_alone:
            return False
        entry = failed.get((phase, head.key))
        if entry is None or entry.head != job.id:  # not settled: it searches for real
            tally.unsettled.append((head, jobs))
            return True
        hits += 1
        if critical:
            wakeups.append(now + backoff)
        if entry.wake is not None and entry.wake > now:
            wakeups.append(entry.wake)  # as the search asked (SearchCache.known_failure)
    if hits:
        tally.misses.add(job.id)
    tally.hits += hits
    tally.wakeups.extend(wakeups)
    return True


def _starts_to_starve(job: JobView, config: PolicyConfig, since: float, now: float) -> bool:
    """Does a large head start to starve after `since`, by `now` (reservation.py)?"""
    starves = starving_from(job.spec, config)
    return starves is not None and since < starves <= now


def _would_throttle(snapshot: Snapshot, head: QuietHead, jobs: Sequence[JobView]) -> bool:
    """Would throttle put the head's queue in waiting mode (a large job joined its group)?"""
    if head.key[0] in snapshot.throttles or head.key not in snapshot.job_index.throttling:
        return False
    return any(may_throttle(job) for job in jobs[head.position :])


def _search_unsettled(
    snapshot: Snapshot, record: QuietCycle, tally: _Tally
) -> Decisions | Handover:
    """Run preempt and reclaim for the heads the memo does not settle, on the working room
    the phases would give them (module docstring, 5); if one of them would start or evict
    anything, what the phases can start from: the victim searches run until then, and the
    victims' weights and units."""
    with snapshot.free_room.scratch() as room:
        cycle = CycleContext(snapshot, room)
        for job_id, parts in record.blocked:
            cycle.hold_again(job_id, parts, reservation=False)
        searches = cycle.caches.searches
        searches.log = []
        searches.until_decided = True  # what follows a decision is the phases' to work out
        for critical in (True, False):
            if not critical:
                for job_id, parts in record.reserved:
                    cycle.hold_again(job_id, parts, reservation=True)
            cycle.waiting.extend(
                ((head.key, jobs), head.position)
                for head, jobs in tally.unsettled
                if (head.key[1] >= CRITICAL_PRIORITY) == critical
            )
            preempt(cycle)
            reclaim(cycle)  # (give_way searches nothing once the check decided something)
            if not cycle.undecided:
                break
        decided = cycle.decided
        if decided.starts or decided.evictions or decided.nominations or decided.notes:
            return cycle.hand_over(SNAPSHOT_MEMOS)
        searched = cycle.decisions()
    assert searched.memo is not None
    now = snapshot.now
    misses = tally.misses.union(searched.preempt_misses)
    later = [t for t in tally.wakeups if t > now]
    if searched.wakeup is not None:
        later.append(searched.wakeup)
    memo = replace(
        searched.memo,
        hits=searched.memo.hits + tally.hits,
        quiet=record.moved_to(now),
        replayed=True,
    )
    return Decisions(
        preempt_misses=tuple(sorted(misses)),
        wakeup=min(later) if later else None,
        memo=memo,
    )
