"""Starts paced to the binder: a step decides no more pods than the scheduler binds.

caldera decides where each pod goes; kube-scheduler or Volcano binds it, at its own pace
(kube-scheduler's client sends 50 requests/s by default). A cycle that decides every start
it can at once — 1,000 of them in a burst — hands the binder a queue it works through for
~20 s, and the last pod's decision → bind is that long; the step that writes them also runs
for seconds. So the controller keeps the pods it started and the binder has yet to bind to
about `bind_backlog` seconds of the binds it saw lately, never fewer than `FLOOR`: the
cycle's `Snapshot.start_budget` is what is left of that (caldera.core.context's
`out_of_starts`), and a bind seen while a cycle was paced makes the next one due. The binder
always has a second's work queued, so throughput stays the binder's; only the waiting moves
from its queue to caldera's, where the policy's order still holds and preemption can see it.

Critical jobs, nominated preemptors and starving large jobs are never paced (the core starts
them regardless), and one gang larger than the budget left still starts whole.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from caldera.k8s.jobs import KubeJob
from caldera.model import JobState

__all__ = ["FLOOR", "WINDOW", "StartPacing", "unbound_pods"]

# Pods the controller may always have waiting for their bind: a 64-task gang starts at once,
# and the first cycle of a burst (no binds seen yet) is not held to one pod at a time.
FLOOR = 64
# Seconds of binds the pace is measured over: long enough to smooth a scheduler's batches
# (Volcano binds once per session, every second), short enough to follow a burst.
WINDOW = 2.0


def unbound_pods(jobs: Iterable[KubeJob]) -> int:
    """Pods of started jobs that wait for their bind: decided, created or about to be."""
    return sum(
        1
        for job in jobs
        if job.state is JobState.RUNNING
        for task in job.tasks
        if not (task.bound or task.done or task.leaving or task.stopping)
    )


class StartPacing:
    """The binds seen over the last `WINDOW` seconds, and the start budget they allow."""

    def __init__(self, backlog: float) -> None:
        self.backlog = backlog  # seconds of binds that may wait (0: no pacing)
        self.binds: deque[float] = deque()
        self.paced = False  # the last cycle left starts for later

    def bound(self, now: float) -> None:
        """A pod of caldera's was seen bound."""
        self.binds.append(now)

    def rate(self, now: float) -> float:
        """Binds per second over the last `WINDOW` seconds."""
        binds = self.binds
        while binds and binds[0] <= now - WINDOW:
            binds.popleft()
        return len(binds) / WINDOW

    def budget(self, unbound: int, now: float) -> int | None:
        """Pods the next cycle may start for jobs below critical (None: no pacing)."""
        if self.backlog <= 0:
            return None
        allowed = max(FLOOR, math.ceil(self.rate(now) * self.backlog))
        return max(0, allowed - unbound)
