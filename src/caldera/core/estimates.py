"""When a running job is expected to end (DESIGN §4.1, §4.4): its `expected_duration`, else
an estimate learned from finished jobs of the same queue and type.

The rules that wait for a job to finish — a reclaim borrower at the W_eff ceiling is waited
for only while it is expected to end before the preemptor's start SLO runs out — need a
number even for jobs that never said how long they run. A runtime learns one per (queue,
type) from the useful work of the jobs that finished there (`DurationEstimates`, the p90 of
the last `WINDOW` of them, once `MIN_SAMPLES` finished) and hands the estimates in with the
snapshot; the core only reads them. A job that has already run past its estimate is
expected to end any moment (its end is `now`), never "unknown": the estimate is corrected by
the job's own progress, and a preemptor's deadline still bounds how long anybody waits.

Estimates change only when a job finishes — which the search memo counts already (a running
job leaving, core/shortcuts/memo.py 2) — so no decision depends on them changing in between.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator, Mapping

from caldera.core.config import PolicyConfig
from caldera.core.views import JobView
from caldera.model import JobSpec, JobType

__all__ = [
    "MIN_SAMPLES",
    "QUANTILE",
    "WINDOW",
    "DurationEstimates",
    "EstimateKey",
    "LearnedDurations",
    "chance_to_end",
    "expected_end",
    "slo_deadline",
    "starving_from",
]

EstimateKey = tuple[str, str]
"""(queue, job type value)."""

QUANTILE = 0.9
"""Which quantile of finished jobs' durations a job without `expected_duration` is expected
to need: p90 — a generous guess, so that waiting for a job is rarely a mistake."""

WINDOW = 200
"""How many of the last finished jobs of a (queue, type) the estimate is taken over: recent
enough to follow a queue whose work changes, large enough for a stable p90."""

MIN_SAMPLES = 5
"""Fewer finished jobs than this give no estimate (the job's end is unknown)."""


class LearnedDurations(Mapping[EstimateKey, float]):
    """What a snapshot carries: (queue, type) -> the p90 estimate, and behind it the sorted
    useful work of the finished jobs it was taken over (`chance_to_end`). Immutable."""

    __slots__ = ("_estimates", "_finished")

    def __init__(
        self,
        estimates: Mapping[EstimateKey, float],
        finished: Mapping[EstimateKey, tuple[float, ...]],
    ) -> None:
        self._estimates = dict(estimates)
        self._finished = dict(finished)

    def __getitem__(self, key: EstimateKey) -> float:
        return self._estimates[key]

    def __iter__(self) -> Iterator[EstimateKey]:
        return iter(self._estimates)

    def __len__(self) -> int:
        return len(self._estimates)

    def finished(self, key: EstimateKey) -> tuple[float, ...]:
        """The useful work of the last finished jobs of `key`, sorted (empty: none)."""
        return self._finished.get(key, ())


class DurationEstimates:
    """Learns, per (queue, type), the p90 of finished jobs' useful work (seconds).

    Kept by a runtime across cycles (the kernel observes each job that succeeds); `view()`
    is what a snapshot carries. Deterministic: the same finishes in the same order give the
    same estimates."""

    def __init__(self) -> None:
        self._recent: dict[EstimateKey, deque[float]] = {}
        self._sorted: dict[EstimateKey, list[float]] = {}
        self._view = LearnedDurations({}, {})

    def observe(self, spec: JobSpec, work: float) -> None:
        """A job of `spec` finished after `work` seconds of useful work."""
        if not work > 0:
            return
        key = (spec.queue, spec.type.value)
        recent = self._recent.setdefault(key, deque())
        ordered = self._sorted.setdefault(key, [])
        if len(recent) == WINDOW:
            del ordered[bisect.bisect_left(ordered, recent.popleft())]
        recent.append(work)
        bisect.insort(ordered, work)
        estimates = dict(self._view)
        finished = {k: self._view.finished(k) for k in self._sorted}
        if len(ordered) >= MIN_SAMPLES:
            estimates[key] = ordered[min(int(QUANTILE * len(ordered)), len(ordered) - 1)]
            finished[key] = tuple(ordered)
        self._view = LearnedDurations(estimates, finished)

    def view(self) -> LearnedDurations:
        """The current estimates, immutable (a new mapping after each change)."""
        return self._view


def expected_end(job: JobView, estimates: Mapping[EstimateKey, float], now: float) -> float:
    """When `job` is expected to end (inf: nobody can tell). From its `expected_duration`,
    else its queue's and type's learned estimate, less the work it has done; a job past that
    is expected to end now."""
    spec = job.spec
    total = spec.expected_duration
    if total is None or total <= 0:
        total = estimates.get((spec.queue, spec.type.value))
        if total is None:
            return float("inf")
    return now + max(total - job.work_done(now), 0.0)


def chance_to_end(
    job: JobView, estimates: Mapping[EstimateKey, float], now: float, by: float
) -> float | None:
    """The learned chance that `job` ends by itself by `by`: among the finished jobs of its
    queue and type that ran longer than it has so far, the share that ended within its work
    by then (the estimate corrected by the job's own progress). None when nothing tells:
    `expected_duration` given (a job says how long it runs, not how likely), or fewer than
    `MIN_SAMPLES` finished jobs ran that long."""
    spec = job.spec
    if spec.expected_duration is not None and spec.expected_duration > 0:
        return None
    if not isinstance(estimates, LearnedDurations):
        return None
    finished = estimates.finished((spec.queue, spec.type.value))
    work = job.work_done(now)
    longer = len(finished) - bisect.bisect_right(finished, work)
    if longer < MIN_SAMPLES:
        return None
    ended = bisect.bisect_right(finished, work + max(by - now, 0.0)) - (len(finished) - longer)
    return ended / longer


def slo_deadline(spec: JobSpec, config: PolicyConfig) -> float | None:
    """When a job's start SLO runs out (None: its type has none)."""
    slo = config.slo.get(spec.type.value)
    return None if slo is None else spec.submit + slo


_LARGE_TYPE = JobType.LARGE.value  # an enum's `.value` is a Python-level property


def starving_from(spec: JobSpec, config: PolicyConfig) -> float | None:
    """When a large job starts to starve: a quarter of its start SLO after its submission
    (core/reservation.py). None: never (not a large job, or no SLO)."""
    if spec.type is not JobType.LARGE:
        return None
    slo = config.slo.get(_LARGE_TYPE)
    return None if slo is None else spec.submit + slo / 4
