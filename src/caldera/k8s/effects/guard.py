"""The last check before any pod is removed: refuse what caldera must never touch.

DESIGN §3 says no runtime may ever evict a critical job, a protected job or a
conformance-protected one. The decision core never asks; the kernel refuses such an
eviction before it reaches the cluster; and this guard checks once more, just before the
request is sent, the *live pod* the API returns against the *job* caldera knows.

Protection is judged from the job (its TrainingJob's spec, whose `type: critical` and
`protected: true` the API server admits only for users holding the RBAC verbs, and which is
immutable) — never from the pod's labels, which a user could write (issue 10, defect 2: a
running pod relabelled `protected=true` deadlocked an eviction). The pod only has to be
caldera's: created by caldera, for this job (its owner is the job's TrainingJob), outside
the cluster's own namespaces.

`Purpose` says why a pod is being removed. Only evictions (preempt, reclaim, window) are
held to the protection rules: a job whose gang broke, whose start timed out or whose
TrainingJob the user deleted is stopping for its own reasons.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Protocol

from caldera.k8s.settings import RESERVED_NAMESPACES
from caldera.model import CRITICAL_PRIORITY, JobSpec
from caldera.trainingjob_api import MANAGED

__all__ = ["Purpose", "refusal"]


class Purpose(StrEnum):
    EVICT = "evict"  # the cycle chose it as a victim (preempt, reclaim, window)
    STOP = "stop"  # its own gang broke, or its start timed out: stop the rest
    CLEANUP = "cleanup"  # its job is gone, or the pod is left over from an old attempt
    FORCE = "force"  # still terminating long after its grace period: delete with grace 0


class _Job(Protocol):
    @property
    def spec(self) -> JobSpec: ...

    @property
    def uid(self) -> str: ...


def refusal(pod: Mapping[str, Any], purpose: Purpose, job: _Job | None = None) -> str | None:
    """Why this pod must not be removed for `purpose`, or None when it may be. `job`: the
    job caldera removes it for (None: a pod no job claims)."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    where = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    if labels.get(MANAGED) != "true":
        return f"pod {where} was not created by caldera"
    if metadata.get("namespace") in RESERVED_NAMESPACES:
        return f"pod {where} is in {metadata.get('namespace')}"
    if job is not None:
        owners = {ref.get("uid") for ref in metadata.get("ownerReferences") or []}
        if job.uid not in owners:
            return f"pod {where} does not belong to job {job.spec.id}"
    if purpose is not Purpose.EVICT:
        return None
    if job is None:
        return f"pod {where} belongs to no job caldera knows: not a victim"
    spec = job.spec
    if not spec.never_a_victim:
        return None
    if spec.priority >= CRITICAL_PRIORITY:  # which of the rule's three reasons, for the log
        return f"pod {where} is of a critical job"
    return f"pod {where} is of a {'protected' if spec.protected else 'system'} job"
