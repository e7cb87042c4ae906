"""The scheduling cycle: snapshot in, decisions out. No I/O, no wall clock, deterministic.

1. enqueue   which pending jobs may be scheduled now (queues, windows, capability)
2. allocate  place whole gangs in free room, queues by share
3. preempt   free room inside a queue for jobs that did not fit
4. reclaim   take back lent room across queues
5. backfill  grow elastic jobs in what is left
6. throttle  waiting mode on or off for large jobs

Critical jobs go through 2–4 first, on their own: room a critical job can reach — free, or
held by its victims — is settled before any lower-priority job may take it in this cycle.
"""

from __future__ import annotations

from dataclasses import replace

from caldera.core.allocate import allocate
from caldera.core.backfill import backfill
from caldera.core.context import CycleContext
from caldera.core.decisions import Decisions
from caldera.core.defrag import place_deferred
from caldera.core.enqueue import enqueue
from caldera.core.jobindex import GroupKey
from caldera.core.policy import Policy
from caldera.core.preempt import preempt
from caldera.core.reclaim import reclaim
from caldera.core.shortcuts.quiet import remember, replay
from caldera.core.shortcuts.searches import exact_for
from caldera.core.snapshot import Snapshot
from caldera.core.throttle import throttle
from caldera.core.waiting import waiting_reasons
from caldera.model import CRITICAL_PRIORITY

__all__ = ["CALDERA", "critical_first", "run"]


def run(snapshot: Snapshot, policy: Policy) -> Decisions:
    """Decide one cycle under `policy` (`CALDERA`, a baseline, or any composition; look one
    up by name in `caldera.policies`). The snapshot (and its room) is exactly as before when
    this returns. Under a policy that remembers quiet cycles (`CALDERA`), a cycle that can
    only decide what the last one did — nothing — is answered from the last one's record
    without running the phases (core/shortcuts/quiet.py)."""
    quiet = (
        policy.remembers_quiet_cycles
        and not snapshot.explain
        and snapshot.start_budget is None  # a paced cycle is not what the next one repeats
        and exact_for(snapshot.config)
    )
    known = None
    if quiet:
        replayed = replay(snapshot)
        if isinstance(replayed, Decisions):
            return replayed
        known = replayed
    with snapshot.free_room.scratch() as room:
        cycle = CycleContext(snapshot, room)
        if known is not None:
            cycle.take_over(known)
        for phase in policy.phases:
            phase(cycle)
        decisions = cycle.decisions()
        if quiet:
            return remember(cycle, decisions)
        if not snapshot.explain:
            return decisions
        return replace(decisions, waiting=waiting_reasons(cycle))


def _critical(key: GroupKey) -> bool:
    return key[1] >= CRITICAL_PRIORITY


def _not_critical(key: GroupKey) -> bool:
    return key[1] < CRITICAL_PRIORITY


def critical_first(cycle: CycleContext) -> None:
    """2–4 for critical jobs alone; the phases that follow serve everybody else."""
    cycle.pass_filter = _critical
    allocate(cycle)
    preempt(cycle)
    reclaim(cycle)
    place_deferred(cycle)  # `pack_with_victims`: deferred jobs without a plan (core/defrag.py)
    cycle.pass_filter = _not_critical


CALDERA = Policy(
    name="caldera",
    phases=(enqueue, critical_first, allocate, preempt, reclaim, backfill, throttle),
    description="gangs, topology, fewest/cheapest victims, graceful eviction, throttle",
    remembers_quiet_cycles=True,  # core/shortcuts/quiet.py's proof reads these phases
)
