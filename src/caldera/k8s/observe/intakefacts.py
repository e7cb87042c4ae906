"""What the TrainingJob intake tells the runtime it saw (`caldera.k8s.observe.intake.Intake`).

Small frozen records that change nothing themselves, as the pod watcher's
(`caldera.k8s.observe.podfacts`) and the service's (`caldera.service.observe`): the intake reads
the TrainingJobs, their pods and what the runtime knows, and says what it found; the runtime
applies each record (`caldera.k8s.observe.intakeapply.apply_intake`) before the next is made, so a
job forgotten and re-created between two looks is seen in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

from caldera.k8s.cluster.api import Object
from caldera.k8s.jobs import KubeJob

__all__ = [
    "IntakeObservation",
    "JobAdmitted",
    "JobGone",
    "JobRefused",
    "JobTakenBack",
    "SettledSeen",
    "SettledThere",
]


@dataclass(frozen=True, slots=True)
class JobAdmitted:
    """A new TrainingJob the platform layer accepted (Pending) or holds (`held`: why)."""

    job: KubeJob
    held: str | None


@dataclass(frozen=True, slots=True)
class JobRefused:
    """A new TrainingJob refused before it became a job: Rejected, with the one-line reason."""

    obj: Object
    reason: str


@dataclass(frozen=True, slots=True)
class JobTakenBack:
    """A job a previous controller ran (restart, fail-over), rebuilt from its status and the
    pods of its current attempt (`job.tasks`); `job.lost_tasks` pods vanished meanwhile."""

    job: KubeJob


@dataclass(frozen=True, slots=True)
class JobGone:
    """The job's TrainingJob is gone (its owner deleted it, or it was re-created)."""

    job: KubeJob


@dataclass(frozen=True, slots=True)
class SettledSeen:
    """The cache shows the final status this controller wrote for `uid`: it need not be
    remembered as settled any more."""

    uid: str


@dataclass(frozen=True, slots=True)
class SettledThere:
    """The uids of every TrainingJob there now: a settled one not among them is gone for good."""

    uids: frozenset[str]


IntakeObservation = JobAdmitted | JobRefused | JobTakenBack | JobGone | SettledSeen | SettledThere
