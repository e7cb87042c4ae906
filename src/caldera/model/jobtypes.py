"""Job types and the priority classes they map to — the one place this table lives (seed 000).

Users pick a job type; the platform sets the priority class. Nobody types a priority number.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CRITICAL_PRIORITY",
    "ESCALATION_CEILING",
    "PRIORITY_CLASSES",
    "SYSTEM_PRIORITY_CLASSES",
    "JobType",
    "PreemptionPolicy",
    "PriorityClass",
    "priority_class",
]


class JobType(StrEnum):
    CRITICAL = "critical"
    LARGE = "large-job"
    NORMAL = "normal"
    DEBUG = "debug"


class PreemptionPolicy(StrEnum):
    PREEMPT_LOWER = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: PreemptionPolicy

    @property
    def may_preempt(self) -> bool:
        """A class with policy Never never causes an eviction (debug jobs)."""
        return self.preemption_policy is PreemptionPolicy.PREEMPT_LOWER


PRIORITY_CLASSES: dict[JobType, PriorityClass] = {
    JobType.CRITICAL: PriorityClass("critical-job", 1000, PreemptionPolicy.PREEMPT_LOWER),
    JobType.LARGE: PriorityClass("large-job", 800, PreemptionPolicy.PREEMPT_LOWER),
    JobType.NORMAL: PriorityClass("normal-job", 100, PreemptionPolicy.PREEMPT_LOWER),
    JobType.DEBUG: PriorityClass("debug-job", 50, PreemptionPolicy.NEVER),
}

CRITICAL_PRIORITY = PRIORITY_CLASSES[JobType.CRITICAL].value
"""Jobs at or above this value are never victims."""

ESCALATION_CEILING = PRIORITY_CLASSES[JobType.LARGE].value
"""No non-critical job's effective weight ever rises above this (DESIGN §4.2)."""

SYSTEM_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
"""Kubernetes' own classes: jobs carrying them are conformance-protected."""


def priority_class(job_type: JobType) -> PriorityClass:
    return PRIORITY_CLASSES[job_type]
