"""The immutable input of one scheduling cycle.

A snapshot holds the cluster, the queues, every job that is not finished, the queues' waiting
modes and the policy settings, all as of `now`. The cycle reads it and never changes it.
Runtimes build one from their own state. A runtime with many jobs keeps a free-room index
(`Room`) and a `JobIndex` up to date between cycles and hands them in, so the cycle costs what
changed rather than what exists; a snapshot built from a plain tuple of jobs derives both.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from caldera.core.config import PolicyConfig
from caldera.core.jobindex import JobIndex
from caldera.core.room import Room
from caldera.core.shortcuts.memo import SearchMemo
from caldera.core.views import JobView, Nomination, PendingVictim, Throttle
from caldera.model import JobState, Node, Queue

__all__ = ["JobView", "Nomination", "PendingVictim", "Snapshot", "Throttle"]


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle may read. `room` and `index` derive from `nodes` and `jobs`.

    A runtime that hands in its `index` passes no `jobs`: every job is `all_jobs`, the
    index's views, made into a tuple only when something asks (no phase does; a tuple of
    ~10,000 views each cycle cost a simulated backlog ~0.1 ms a cycle)."""

    now: float
    nodes: tuple[Node, ...]
    queues: Mapping[str, Queue]
    jobs: tuple[JobView, ...] = ()  # as given: empty when the index is handed in
    config: PolicyConfig = field(default_factory=PolicyConfig)
    throttles: Mapping[str, Throttle] = field(default_factory=lambda: MappingProxyType({}))
    room: Room | None = None
    index: JobIndex | None = None
    # The last cycle's `Decisions.memo`: failed searches nothing has unsettled
    # (core/shortcuts/memo.py).
    memo: SearchMemo | None = None
    # Say why each pending job waits (`Decisions.waiting`, for the operator's view). Costs a
    # pass over the pending groups each cycle; a runtime nobody looks at (the simulator)
    # turns it off — it changes no decision.
    explain: bool = True
    # Per (queue, type): the learned duration of a job that gave no `expected_duration`
    # (core/estimates.py), kept by the runtime from the jobs that finished.
    estimates: Mapping[tuple[str, str], float] = field(default_factory=lambda: MappingProxyType({}))
    # Per queue: decayed GPU usage (core/fairshare.py), kept by the runtime when
    # `config.fair_share_half_life` is on; empty: fair share over time is off.
    decayed_usage: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # Tasks the cycle may start for jobs below critical before it stops starting them (None:
    # no bound). The Kubernetes controller paces its starts to what the binder takes
    # (caldera.k8s.pacing): a step that decided 1,000 starts at once left the last pod
    # waiting ~20 s for kube-scheduler. Critical jobs, nominated preemptors and starving large
    # jobs start regardless; the jobs a paced cycle did not reach wait for the next one.
    start_budget: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.now):
            raise ValueError("snapshot time must be finite")
        if self.index is None:
            object.__setattr__(self, "index", JobIndex(self.jobs))
        if self.room is None:
            room = Room(self.nodes)
            for job in self.all_jobs:
                for task in job.placement:
                    room.take(task)
                for task in job.releasing:
                    room.take(task)
            object.__setattr__(self, "room", room)

    @property
    def all_jobs(self) -> tuple[JobView, ...]:
        """Every job that is not finished: `jobs`, or the index's views when none were given."""
        return self.jobs or tuple(self.job_index.views.values())

    @property
    def job_index(self) -> JobIndex:
        assert self.index is not None
        return self.index

    @property
    def by_state(self) -> Mapping[JobState, Collection[JobView]]:
        """Jobs grouped by state."""
        return {state: jobs.values() for state, jobs in self.job_index.by_state.items()}

    def in_state(self, state: JobState) -> Collection[JobView]:
        return self.job_index.by_state[state].values()

    @property
    def by_id(self) -> Mapping[str, JobView]:
        return self.job_index.views

    @property
    def free_room(self) -> Room:
        assert self.room is not None
        return self.room
