"""The controller's job: a TrainingJob as caldera tracks it, and its tasks (pods).

`KubeJob` carries the facts every runtime tracks (`TrackedJob`: state, progress, evictions,
holds, the reservation) plus where it lives on the cluster (namespace, name, uid, the
object's generation), its pod templates and its conditions. `KubeTask` is one pod of one
attempt; what a restarted controller needs about it is on the pod itself (labels for job,
attempt and rank, the `caldera.io/placement` annotation, its deletion timestamp and phase),
so no per-task state is kept in the job's status (issue 9, defect 9: a status listing
every task outgrew the object at ~1,000 tasks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from caldera.core import TaskPlacement
from caldera.k8s.cluster.api import Object, from_rfc3339
from caldera.k8s.effects.render import Workload
from caldera.runtime.job import TrackedJob
from caldera.runtime.wire import NodeKeys, placement_from_wire
from caldera.trainingjob_api import ATTEMPT, PLACEMENT, RANK

__all__ = ["Condition", "KubeJob", "KubeTask", "pod_attempt", "task_from_pod"]


@dataclass
class KubeTask:
    """One task of one attempt: its decided placement and the pod that runs it."""

    rank: int
    attempt: int
    placement: TaskPlacement
    pod: str
    created_at: float = 0.0
    leaving: bool = False  # evicted; holds its room until the pod is gone
    kill_at: float | None = None  # end of its grace period (leaving or stopping)
    bound: bool = False  # the scheduler bound it to its node
    ready_at: float | None = None  # its containers started running
    done: bool = False
    exit_code: int | None = None  # None while running, or when nobody saw how it ended
    deleting: bool = False  # the pod has a deletion timestamp
    finished: bool = False  # its pod ended (Succeeded/Failed) and still exists
    resent: bool = False  # its removal was asked again after a restart
    forced: bool = False  # stuck terminating: deleted again with grace 0
    counted: bool = field(default=False, compare=False)  # its room is taken in the index

    @property
    def stopping(self) -> bool:
        """Deleted because its gang cannot run whole (not an eviction)."""
        return self.kill_at is not None and not self.leaving


@dataclass
class Condition:
    """One entry of `status.conditions` (the shape `kubectl wait --for=condition=X` reads)."""

    type: str
    status: bool
    reason: str
    message: str
    since: float  # lastTransitionTime

    def to_wire(self, generation: int, time: Any) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": time(self.since),
            "observedGeneration": generation,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Condition:
        since = data.get("lastTransitionTime")
        return cls(
            str(data["type"]),
            data.get("status") == "True",
            str(data.get("reason") or ""),
            str(data.get("message") or ""),
            from_rfc3339(str(since)) if since else 0.0,
        )


@dataclass(kw_only=True)
class KubeJob(TrackedJob[KubeTask]):
    """A job of the controller: the common facts and the TrainingJob it lives in."""

    namespace: str
    name: str
    uid: str  # the TrainingJob's uid: owner of everything created for the job
    workload: Workload = field(default_factory=Workload)
    generation: int = 1
    conditions: dict[str, Condition] = field(default_factory=dict)
    started_under: dict[str, Any] | None = None  # the reservation it started in (audit)
    lost_tasks: int = 0  # tasks whose pod or node vanished while the controller was away
    expected_tasks: int = 0  # running tasks of the attempt when the status was written
    bad_report: str | None = None  # the last progress/checkpoint report ignored (said once)
    waiting: str | None = (
        None  # why it waits, one line (caldera.k8s.reporting.waiting), while Pending
    )
    waiting_kind: str | None = None  # the Waiting condition's reason last said

    def condition(self, kind: str, status: bool, reason: str, message: str, now: float) -> bool:
        """Set a condition; its transition time moves only when its status flips. True if
        anything changed."""
        old = self.conditions.get(kind)
        if old is not None and (old.status, old.reason, old.message) == (status, reason, message):
            return False
        since = old.since if old is not None and old.status == status else now
        self.conditions[kind] = Condition(kind, status, reason, message, since)
        return True


def pod_attempt(pod: Object) -> int:
    """The attempt a caldera pod was created for (0 when its label is unreadable)."""
    try:
        return int(_labels(pod).get(ATTEMPT, ""))
    except ValueError:
        return 0


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def task_from_pod(pod: Object, keys: NodeKeys) -> KubeTask | None:
    """The task a caldera pod runs, as a restarted controller finds it; None when the pod
    carries no readable placement or its node is gone."""
    metadata = pod.get("metadata") or {}
    labels = _labels(pod)
    text = (metadata.get("annotations") or {}).get(PLACEMENT)
    try:
        placement = placement_from_wire(json.loads(text), keys) if text else None
        rank = int(labels.get(RANK, ""))
        attempt = int(labels.get(ATTEMPT, ""))
    except (ValueError, KeyError, TypeError):
        return None
    if placement is None:
        return None
    created = metadata.get("creationTimestamp")
    deleted = metadata.get("deletionTimestamp")
    return KubeTask(
        rank=rank,
        attempt=attempt,
        placement=placement,
        pod=str(metadata.get("name")),
        created_at=from_rfc3339(str(created)) if created else 0.0,
        kill_at=from_rfc3339(str(deleted)) if deleted else None,
        deleting=deleted is not None,
        bound=bool((pod.get("spec") or {}).get("nodeName")),
    )
