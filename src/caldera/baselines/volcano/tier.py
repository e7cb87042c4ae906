"""The plugins' victim rules: which of a node's candidate victims each plugin allows.

Volcano asks each plugin of a tier for its victims among the same candidates and keeps the
tasks every one of them allows (framework/session_plugins.go, Preemptable and Reclaimable:
the intersection over the tier's plugins; the first tier with an answer decides). Volcano's CI
configuration (`volcano`) puts priority, gang (enablePreemptable: false) and conformance in
the first tier, so preempt asks priority and conformance only, and reclaim gang and
conformance only. Seed 001 puts all seven plugins in one tier (caldera.devcluster.volcano
SEED_001), so, citing Volcano v1.15.1's pkg/scheduler/plugins:
  S1. gang judges preempt victims too (gang/gang.go, preemptableFn, registered for both
      preempt and reclaim): a victim job keeps at least `min_available` ready tasks.
  S2. drf judges preempt victims (drf/drf.go, preemptableFn): a task is a victim only if
      its job's dominant share after losing it (counted down task by task) is not below the
      preemptor job's dominant share with one more task (within 1e-6).
  S3. proportion judges reclaim victims (proportion/proportion.go, ReclaimableFn): only
      while the victim's queue holds more than it deserves in some resource (counted down
      as victims are taken). drf judges reclaim only with hierarchy enabled (not here);
      priority has no reclaim rule.
(S4, nodeorder's scores, is in `nodeorder`.)

Each rule reads the candidates in victim order and returns the positions it allows; none of
them changes the session.
"""

from __future__ import annotations

from collections.abc import Sequence

from caldera.baselines.proportion import EPSILON, Vector
from caldera.baselines.volcano.session import Pod, Session, capacity
from caldera.core.snapshot import JobView

__all__ = ["drf_allows", "gang_allows", "proportion_allows"]


def gang_allows(session: Session, pods: Sequence[Pod]) -> set[int]:
    """gang's preemptable/reclaimable rule: which of `pods` (by position) it allows."""
    spare: dict[str, int] = {}
    allowed: set[int] = set()
    for i, (victim, _) in enumerate(pods):
        left = spare.setdefault(victim.id, session.running(victim) - victim.spec.min_available)
        if left > 0:
            spare[victim.id] = left - 1
            allowed.add(i)
    return allowed


def _dominant(vector: Vector, total: Vector) -> float:
    """drf's calculateShare: the largest share of the cluster's capacity (helpers.Share: a
    resource the cluster lacks counts 1 when asked for, else 0)."""
    return max(
        (v / t if t > 0 else (1.0 if v > 0 else 0.0)) for v, t in zip(vector, total, strict=True)
    )


def _times(request: Vector, count: int) -> Vector:
    return (request[0] * count, request[1] * count, request[2] * count)


def drf_allows(session: Session, job: JobView, holding: int, pods: Sequence[Pod]) -> set[int]:
    """S2: drf's preemptable rule."""
    total = capacity(session.cycle.snapshot.nodes)
    spec = job.spec
    mine = (float(spec.gpu), float(spec.cpu), float(spec.memory))
    preemptor = _dominant(_times(mine, holding + 1), total)
    left: dict[str, int] = {}
    allowed: set[int] = set()
    for i, (victim, _) in enumerate(pods):
        tasks = left.setdefault(victim.id, session.running(victim)) - 1
        left[victim.id] = tasks
        theirs = (float(victim.spec.gpu), float(victim.spec.cpu), float(victim.spec.memory))
        share = _dominant(_times(theirs, tasks), total)
        if preemptor < share or abs(preemptor - share) <= _DRF_DELTA:
            allowed.add(i)
    return allowed


_DRF_DELTA = 0.000001  # drf.go shareDelta


def proportion_allows(session: Session, pods: Sequence[Pod]) -> set[int]:
    """S3: proportion's reclaimable rule."""
    allocated: dict[str, list[float]] = {}
    allowed: set[int] = set()
    for i, (victim, _) in enumerate(pods):
        share = session.queues.get(victim.spec.queue)
        if share is None:
            continue
        held = allocated.setdefault(victim.spec.queue, list(share.allocated))
        if any(a > d + EPSILON for a, d in zip(held, share.deserved, strict=True)):
            request = victim.spec.task_request
            held[0] -= request.gpu
            held[1] -= request.cpu
            held[2] -= request.memory
            allowed.add(i)
    return allowed
