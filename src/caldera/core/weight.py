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

__all__ = ["effective_weight"]


def effective_weight(job: JobView, config: PolicyConfig, now: float) -> float:
    base = job.spec.priority
    if base >= CRITICAL_PRIORITY:
        return float(base)
    hours = max(job.work_done(now), 0.0) / 3600
    weight = base + config.alpha * math.log1p(hours) + config.beta * job.progress(now) ** 2
    return min(weight, float(max(config.ceiling, base)))
