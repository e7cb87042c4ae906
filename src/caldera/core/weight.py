"""Dynamic effective weight (DESIGN §4.2, seed 001): age and progress defend a running job.

    W_eff = W_base + α·ln(1 + hours run) + β·progress²,  capped at the ceiling (800)

for every non-critical job. W_eff only defends: it decides whether a running job may be a
victim and in which order, never what a job may preempt.
"""

from __future__ import annotations

import math

from caldera.core.config import PolicyConfig
from caldera.core.snapshot import JobView
from caldera.model import CRITICAL_PRIORITY

__all__ = ["Horizons", "defends_against", "effective_weight"]

Horizons = dict[tuple[str, str], tuple[JobView, JobView, PolicyConfig, float]]
"""(victim, holder) -> (their views and the settings it holds for, a time up to which the
victim's weight stays below the holder's priority), kept by the job index across cycles
(`JobIndex.weight_horizons`) for `defends_against`."""

_LOOK_AHEAD = (3600.0, 60.0)  # seconds: how far ahead a horizon is tried, longest first
_MARGIN = 1e-6  # below the priority by more than any rounding of the weight
_MOST = 1 << 16  # horizons kept at most (then forgotten all at once)


def effective_weight(job: JobView, config: PolicyConfig, now: float) -> float:
    spec = job.spec
    base = spec.priority
    if base >= CRITICAL_PRIORITY:
        return float(base)
    # JobView.work_done and .progress written out: asked for every candidate victim of
    # every pool a cycle builds (about a million times in a 20,000-job backlog).
    since = job.running_since
    work = job.work_base if since is None else job.work_base + max(now - since, 0.0)
    reported = job.reported_progress
    if reported is not None:
        progress = min(max(reported, 0.0), 1.0)
    else:
        expected = spec.expected_duration
        progress = min(work / expected, 1.0) if expected and expected > 0 else 0.0
    weight = base + config.alpha * math.log1p(max(work, 0.0) / 3600) + config.beta * progress**2
    return min(weight, float(max(config.ceiling, base)))


def defends_against(
    victim: JobView,
    holder: JobView,
    config: PolicyConfig,
    now: float,
    horizons: Horizons | None = None,
) -> bool:
    """Has a pending victim of its holder's own queue grown to the holder's priority while a
    timed eviction waited (core/timing.py)? It then defends itself, as the victim search
    would (VictimPools): the plan no longer holds (eviction.no_longer_a_victim). Of what
    ends a pending victim's part in a plan, the one thing time alone brings about.

    Asked for every victim of every waiting plan in every cycle, so with `horizons` the
    answer "not yet" is kept until a time checked ahead: for one view the weight never falls
    as time passes (work done and progress only grow, and each step of the formula keeps
    their order), so a weight below the priority, by more than a rounding, at a later time
    is below it at every time before."""
    if victim.spec.queue != holder.spec.queue:
        return False
    priority = holder.spec.priority
    key = (victim.id, holder.id)
    if horizons is not None:
        known = horizons.get(key)
        if (
            known is not None
            and now <= known[3]
            and known[0] is victim
            and known[1] is holder
            and known[2] is config
        ):
            return False
    if effective_weight(victim, config, now) >= priority:
        return True
    if horizons is not None:
        for ahead in _LOOK_AHEAD:
            later = now + ahead
            if effective_weight(victim, config, later) < priority - _MARGIN:
                if len(horizons) >= _MOST:
                    horizons.clear()
                horizons[key] = (victim, holder, config, later)
                break
    return False
