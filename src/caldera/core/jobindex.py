"""Active jobs, indexed the ways the cycle reads them.

A runtime with thousands of jobs cannot afford to regroup them every cycle, so — like the
free-room index — it keeps a `JobIndex` up to date as jobs change (`put`, `drop`) and hands
it to the snapshot. The cycle only reads it. Built from a plain tuple of views it gives the
same answers, which is what tests do.

Pending jobs are grouped by (queue, priority, shape), each group sorted by rank (priority,
submit time, id): jobs of one group fit, fail, preempt or are refused alike, so the cycle can
decide for a group at once instead of job by job.

`version` counts the changes that can open room or victims to a waiting job: a job that runs,
releases, or holds a nomination arriving, changing or leaving, and a pending large job leaving
the pending set (held, cancelled: the room a cycle reserved for it while it starved is free
for the others). Other pending jobs coming and going do not count: a new competitor can only
take from the others (core/shortcuts/memo.py relies on this). `token` tells one index from another.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from itertools import count
from typing import TypeVar, cast

from caldera.core.config import PolicyConfig
from caldera.core.views import JobView
from caldera.model import JobSpec, JobState, JobType

__all__ = ["GroupKey", "JobIndex", "group_key", "may_throttle"]

T = TypeVar("T")

GroupKey = tuple[str, int, int]
"""(queue, priority, shape) of a pending group."""


def group_key(spec: JobSpec) -> GroupKey:
    """The pending group a job of `spec` belongs to."""
    return (spec.queue, spec.priority, spec.shape)


_TOKENS = count(1)


def _opens_room(job: JobView) -> bool:
    """Does this view hold room or victims a waiting job could be given (core/shortcuts/memo.py)?"""
    return (
        job.state is JobState.RUNNING
        or job.state is JobState.RELEASING
        or (job.nomination is not None)
    )


def _may_reserve(job: JobView) -> bool:
    """Could this view hold room a cycle reserves (a pending large job, reservation.py)?
    Leaving the pending set without starting, it gives that room to the others."""
    return job.state is JobState.PENDING and job.spec.type is JobType.LARGE


def may_throttle(job: JobView) -> bool:
    """Would this waiting job put its queue in waiting mode? A large job, the first time
    (core/throttle.py)."""
    return job.spec.type is JobType.LARGE and not job.throttled_once


def _leaves_reserving(old: JobView, new: JobView) -> bool:
    return _may_reserve(old) and new.state is not JobState.PENDING


def _rank(job: JobView) -> tuple[int, float, str]:
    return job.spec.rank


class JobIndex:
    def __init__(self, jobs: Iterable[JobView] = ()) -> None:
        self.views: dict[str, JobView] = {}
        self.by_state: dict[JobState, dict[str, JobView]] = {state: {} for state in JobState}
        self.pending: dict[GroupKey, list[JobView]] = {}
        # Pending jobs per group that `may_throttle`: throttle and the quiet check look for
        # one only in a group that has any, instead of scanning a backlog's large groups
        # (thousands of jobs, every one throttled once already) cycle after cycle.
        self.throttling: dict[GroupKey, int] = {}
        # queue -> [milli-GPUs, millicores, MiB held (running + releasing),
        #           milli-GPUs, millicores, MiB releasing]
        self.usage: dict[str, list[int]] = {}
        self.growable: dict[str, JobView] = {}  # running elastic jobs short of their tasks
        self.nominated: dict[str, JobView] = {}  # pending preemptors holding reserved room
        # Running jobs that could ever be victims: queue -> base priority -> id -> view.
        self.victims: dict[str, dict[int, dict[str, JobView]]] = {}
        # The same, by node: queue -> base priority -> node -> GPU devices its tasks use (a
        # device shared by two tasks counts twice). What evicting all of them could free at
        # most, for a quick "never, even then" before a victim search (core/domains.py).
        self.victim_devices: dict[str, dict[int, dict[int, int]]] = {}
        self._devices_version = 0
        self._lower: dict[tuple[str, int], tuple[int, dict[int, int]]] = {}
        # node -> milli-GPUs held by running work that is never a victim (core/packing.py)
        self.pinned: dict[int, int] = {}
        self._pinned_version = 0
        self._pinned_derived: dict[Hashable, tuple[int, object]] = {}
        self._derived: dict[Hashable, tuple[int, object]] = {}
        # (victim, holder) -> until when a waiting plan's victim cannot defend itself by its
        # weight (core/weight.py `Horizons`; checked against the views it was worked out for).
        self.weight_horizons: dict[
            tuple[str, str], tuple[JobView, JobView, PolicyConfig, float]
        ] = {}
        # Possible victims evicted before (now running again) -> when: their cooldowns; and
        # the same as (when, id) in order, for the next cooldown to end.
        self.evicted_before: dict[str, float] = {}
        self._evicted_order: list[tuple[float, str]] = []
        self.token = next(_TOKENS)
        self.version = 0
        for job in jobs:
            self.put(job)

    def __len__(self) -> int:
        return len(self.views)

    def put(self, job: JobView) -> None:
        """Add a job, or replace the view with the same id."""
        old = self.views.get(job.id)
        if old is not None:
            self._remove(old)
        if old is not job and (
            _opens_room(job)
            or (old is not None and (_opens_room(old) or _leaves_reserving(old, job)))
        ):
            self.version += 1
        self._add(job)

    def drop(self, job_id: str) -> None:
        """Forget a job (finished, cancelled, rejected)."""
        old = self.views.get(job_id)
        if old is not None:
            self._remove(old)
            if _opens_room(old) or _may_reserve(old):
                self.version += 1

    def _add(self, job: JobView) -> None:
        self.views[job.id] = job
        self.by_state[job.state][job.id] = job
        spec = job.spec
        if job.state is JobState.PENDING:
            key = group_key(spec)
            group = self.pending.setdefault(key, [])
            bisect.insort(group, job, key=_rank)
            if may_throttle(job):
                self.throttling[key] = self.throttling.get(key, 0) + 1
            if job.nomination is not None:
                self.nominated[job.id] = job
        elif job.placement or job.releasing:
            self._count(job, 1)
        if job.state is JobState.RUNNING and len(job.placement) >= spec.min_available:
            if spec.tasks > len(job.placement) + len(job.releasing):
                self.growable[job.id] = job
            if not job.spec.never_a_victim:
                by_priority = self.victims.setdefault(spec.queue, {})
                by_priority.setdefault(spec.priority, {})[job.id] = job
                self._hold_devices(job, 1)
                if job.last_evicted_at is not None:
                    self.evicted_before[job.id] = job.last_evicted_at
                    bisect.insort(self._evicted_order, (job.last_evicted_at, job.id))
        if job.state is JobState.RUNNING and job.spec.never_a_victim:
            self._pin(job, 1)

    def _remove(self, job: JobView) -> None:
        del self.views[job.id]
        del self.by_state[job.state][job.id]
        spec = job.spec
        if job.state is JobState.PENDING:
            key = group_key(spec)
            group = self.pending[key]
            del group[bisect.bisect_left(group, spec.rank, key=_rank)]
            if not group:
                del self.pending[key]
            if may_throttle(job):
                left = self.throttling[key] - 1
                if left:
                    self.throttling[key] = left
                else:
                    del self.throttling[key]
            self.nominated.pop(job.id, None)
        elif job.placement or job.releasing:
            self._count(job, -1)
        if job.state is JobState.RUNNING and job.spec.never_a_victim:
            self._pin(job, -1)
        self.growable.pop(job.id, None)
        at = self.evicted_before.pop(job.id, None)
        if at is not None:
            order = self._evicted_order
            del order[bisect.bisect_left(order, (at, job.id))]
        by_priority = self.victims.get(spec.queue)
        if by_priority is not None:
            same = by_priority.get(spec.priority)
            if same is not None and same.pop(job.id, None) is not None:
                self._hold_devices(job, -1)
                if not same:
                    del by_priority[spec.priority]

    def next_cooldown_end(self, cooldown: float, now: float) -> float:
        """The earliest `evicted at + cooldown` after `now` among the possible victims evicted
        before (inf: none): when the next of them may be a victim again."""
        order = self._evicted_order
        # `at + cooldown` grows with `at`: the first entry past `now` is the earliest.
        first = bisect.bisect_right(order, now, key=lambda entry: entry[0] + cooldown)
        return order[first][0] + cooldown if first < len(order) else math.inf

    def lower_devices(self, queue: str, priority: int) -> dict[int, int]:
        """Node -> GPU devices used by the queue's possible victims below `priority`; kept
        until the index changes."""
        key = (queue, priority)
        cached = self._lower.get(key)
        if cached is not None and cached[0] == self._devices_version:
            return cached[1]
        merged: dict[int, int] = {}
        for value, by_node in self.victim_devices.get(queue, {}).items():
            if value < priority:
                for node, count in by_node.items():
                    merged[node] = merged.get(node, 0) + count
        self._lower[key] = (self._devices_version, merged)
        return merged

    def _hold_devices(self, job: JobView, sign: int) -> None:
        spec = job.spec
        self._devices_version += 1
        by_node = self.victim_devices.setdefault(spec.queue, {}).setdefault(spec.priority, {})
        for task in job.placement:
            if task.milli:
                held = by_node.get(task.node, 0) + sign * len(task.devices)
                if held:
                    by_node[task.node] = held
                else:
                    del by_node[task.node]

    def from_pinned(self, key: Hashable, build: Callable[[Mapping[int, int]], T]) -> T:
        """`build(pinned)`, kept under `key` until `pinned` changes (e.g. its sums per
        topology domain, core/reservation.py). The caller must not change what it gets."""
        cached = self._pinned_derived.get(key)
        if cached is not None and cached[0] == self._pinned_version:
            return cast(T, cached[1])
        value = build(self.pinned)
        self._pinned_derived[key] = (self._pinned_version, value)
        return value

    def at_version(self, key: Hashable, build: Callable[[], T]) -> T:
        """`build()`, kept under `key` while `version` holds: for what is derived from the
        jobs that run, release or hold a nomination alone (the nominations' commitments,
        core/context.py). The caller must not change what it gets."""
        cached = self._derived.get(key)
        if cached is not None and cached[0] == self.version:
            return cast(T, cached[1])
        value = build()
        self._derived[key] = (self.version, value)
        return value

    def _pin(self, job: JobView, sign: int) -> None:
        self._pinned_version += 1
        pinned = self.pinned
        for task in job.placement:
            held = pinned.get(task.node, 0) + sign * task.gpu
            if held:
                pinned[task.node] = held
            else:
                pinned.pop(task.node, None)

    def _count(self, job: JobView, sign: int) -> None:
        spec = job.spec
        tasks = len(job.placement) + len(job.releasing)
        leaving = len(job.releasing)
        totals = self.usage.setdefault(spec.queue, [0, 0, 0, 0, 0, 0])
        totals[0] += sign * spec.gpu * tasks
        totals[1] += sign * spec.cpu * tasks
        totals[2] += sign * spec.memory * tasks
        totals[3] += sign * spec.gpu * leaving
        totals[4] += sign * spec.cpu * leaving
        totals[5] += sign * spec.memory * leaving
