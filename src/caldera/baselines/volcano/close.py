"""V1: the session's close — when to ask for the next cycle.

Volcano loops every second; the simulator runs a cycle at every event instant, and between
events nothing Volcano decides changes, except that jobs bound in a cycle become victims in
the next. So a cycle that started such a job while a job still starves asks for a cycle 1 s
later (a wake-up). Decides nothing else.
"""

from __future__ import annotations

from caldera.baselines.common import rerun_after_change
from caldera.baselines.volcano.session import session_for
from caldera.core.context import CycleContext
from caldera.core.snapshot import JobView

__all__ = ["volcano_close"]


def volcano_close(cycle: CycleContext) -> None:
    """V1: Volcano loops every second; ask for the cycle a second later when this one started
    a job that a job still starving could take next time (same queue and lower priority for
    preempt; another reclaimable queue for reclaim)."""
    session = session_for(cycle)
    counted = session.counted
    starving = [  # one job stands for its (queue, priority) group: that is all could_take reads
        jobs[0] for jobs in session.starving.values() if any(job.id not in counted for job in jobs)
    ]
    queues = cycle.snapshot.queues

    def could_take(started: JobView, preemptor: JobView) -> bool:
        if started.spec.queue == preemptor.spec.queue:
            return started.spec.priority < preemptor.spec.priority
        owner = queues.get(started.spec.queue)
        return owner is not None and owner.reclaimable

    rerun_after_change(cycle, starving, could_take)
