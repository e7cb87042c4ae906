"""The scheduling cycle: snapshot in, decisions out. No I/O, no wall clock, deterministic.

1. enqueue   which pending jobs may be scheduled now (queues, windows, capability)
2. allocate  place whole gangs in free room, queues by share
3. preempt   free room inside a queue for jobs that did not fit
4. reclaim   take back lent room across queues
5. backfill  use what is left without delaying a reservation
6. throttle  waiting mode on or off for large jobs
"""

from __future__ import annotations

from caldera.core.allocate import allocate
from caldera.core.backfill import backfill
from caldera.core.context import CycleContext
from caldera.core.decisions import Decisions
from caldera.core.enqueue import enqueue
from caldera.core.policy import Policy, get_policy, register_policy
from caldera.core.preempt import preempt
from caldera.core.reclaim import reclaim
from caldera.core.snapshot import Snapshot
from caldera.core.throttle import throttle

__all__ = ["CALDERA", "run"]


def run(snapshot: Snapshot, policy: Policy | None = None) -> Decisions:
    """Decide one cycle. The snapshot (and its room) is exactly as before when this returns."""
    chosen = policy if policy is not None else get_policy(snapshot.config.name)
    with snapshot.free_room.scratch() as room:
        cycle = CycleContext(snapshot, room)
        for phase in chosen.phases:
            phase(cycle)
        return cycle.decisions()


CALDERA = register_policy(
    Policy(
        name="caldera",
        phases=(enqueue, allocate, preempt, reclaim, backfill, throttle),
        description="gangs, topology, fewest/cheapest victims, graceful eviction, throttle",
    )
)
