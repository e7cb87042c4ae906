"""Starts paced to the binder: a step decides no more pods than the scheduler binds in time.

caldera decides where each pod goes; kube-scheduler or Volcano binds it, at its own pace
(kube-scheduler's client sends 50 requests/s by default; Volcano binds once per scheduling cycle,
every second). A cycle that decides every start it can at once — 1,000 of them in a burst —
hands the binder a queue it works through for ~20 s: the last pod's decision → bind is that
long, and the step that writes them runs for seconds. So the controller keeps a limit on its
pods that wait for their bind and sets it from what it sees: each bind's wait since the
decision. Every `ADJUST_EVERY` seconds it moves: it grows by a quarter when the limit held
starts back while the binder had bound every pod (it waited for more) or every bind came
within `bind_wait`; else, once a bind came later, it shrinks by a fifth, never below
`FLOOR`. So it settles where the binder's queue holds about `bind_wait` seconds of work —
~50 pods in front of kube-scheduler's 50 binds/s — or, in front of a binder whose own
rhythm is slower than that (Volcano binds in scheduling cycles, each pod 1.5–3.5 s after its start
whatever the limit; `BIND_WAIT_VOLCANO`), where the binder no longer runs dry. The cycle's
`Snapshot.start_budget` is what is left of it (caldera.core.context's `out_of_starts`), and
a bind seen while a cycle was paced makes the next one due. The binder always has work
queued, so throughput stays the binder's; the waiting moves from its queue to caldera's,
where the policy's order still holds and preemption can see it.

Critical jobs, nominated preemptors and starving large jobs are never paced (the core starts
them regardless), and one gang larger than the budget left still starts whole.
"""

from __future__ import annotations

from collections.abc import Iterable

from caldera.k8s.jobs import KubeJob
from caldera.k8s.settings import KubeSettings, uses_pod_groups
from caldera.model import JobState

__all__ = ["ADJUST_EVERY", "FLOOR", "StartPacing", "bind_wait_of", "unbound_pods"]

# The limit's least and first value: pods the controller may always have waiting for their
# bind (the first cycle of a burst has seen no bind yet; 48 bind within a second at
# kube-scheduler's default pace).
FLOOR = 48
# Seconds between two changes of the limit: long enough to see the binds of the pods the
# last change let through (Volcano binds once a second), short enough to follow a burst.
ADJUST_EVERY = 1.0
GROW = 1.25
SHRINK = 0.8
# `bind_wait` unless the operator sets one. kube-scheduler binds a pod as soon as it has it,
# at its client's pace. Volcano binds in scheduling cycles, once a second, and a start's PodGroup
# and pods may meet only in the cycle after the next: each pod 1.5–3.5 s after its start
# at any limit (measured at 200 nodes, 48–60 pods waiting), so a bound under that would
# hold its starts to the floor.
BIND_WAIT = 1.5
BIND_WAIT_VOLCANO = 4.0


def bind_wait_of(settings: KubeSettings) -> float:
    """The settings' `bind_wait`, or the default for their scheduler."""
    if settings.bind_wait is not None:
        return settings.bind_wait
    return BIND_WAIT_VOLCANO if uses_pod_groups(settings) else BIND_WAIT


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
    """The limit on pods waiting for their bind, moved by the waits of the binds seen."""

    def __init__(self, bind_wait: float) -> None:
        self.bind_wait = bind_wait  # seconds a start's pods should wait for their bind (0: off)
        self.limit = FLOOR
        self.paced = False  # the last cycle left starts for later
        self._held_back = False  # a cycle was paced since the limit last moved
        self._starved = False  # ... and the binder had bound every pod: it waited for more
        self._slowest = 0.0  # the longest wait of the binds seen since then
        self._binds = 0
        self._moved_at: float | None = None

    def bound(self, waited: float) -> None:
        """A pod of caldera's was seen bound `waited` seconds after its start was decided."""
        self._binds += 1
        self._slowest = max(self._slowest, waited)

    def budget(self, unbound: int, now: float) -> int | None:
        """Pods the next cycle may start for jobs below critical (None: no pacing)."""
        if self.bind_wait <= 0:
            return None
        self._held_back = self._held_back or self.paced
        self._starved = self._starved or (self.paced and unbound == 0)
        if self._moved_at is None:
            self._moved_at = now
        elif now - self._moved_at >= ADJUST_EVERY and self._binds:
            if self._starved or (self._held_back and self._slowest <= self.bind_wait):
                self.limit = int(self.limit * GROW)
            elif self._slowest > self.bind_wait:
                self.limit = max(FLOOR, int(self.limit * SHRINK))
            self._moved_at = now
            self._binds, self._slowest = 0, 0.0
            self._held_back = self._starved = False
        return max(0, self.limit - unbound)
