"""The last check before any pod is deleted: refuse what caldera must never touch.

DESIGN §3 says no runtime may ever evict a critical job, a protected job or a
conformance-protected one. The decision core never asks; the runtime checks the job before
acting on an eviction; and this guard checks the *live pod* the API returns just before the
delete is sent — three independent lines, so a bug in one (or a pod relabelled by hand)
cannot take down online inference or the GPU device plugin.

`Purpose` says why a pod is being deleted. Only evictions (preempt, reclaim, window) are
held to the protection rules: a job whose gang broke, whose start timed out or whose record
the user deleted is stopping for its own reasons. But no purpose lets caldera delete a pod
it did not create, or anything in `kube-system`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from caldera.k8s import names
from caldera.model import CRITICAL_PRIORITY, PRIORITY_CLASSES, JobType
from caldera.model.jobtypes import SYSTEM_PRIORITY_CLASSES

__all__ = ["Purpose", "refusal"]


class Purpose(StrEnum):
    EVICT = "evict"  # the cycle chose it as a victim (preempt, reclaim, window)
    STOP = "stop"  # its own gang broke, or its start timed out: stop the rest
    CLEANUP = "cleanup"  # its record is gone, or the pod is left over from an old attempt


_CRITICAL_CLASSES = frozenset({PRIORITY_CLASSES[JobType.CRITICAL].name}) | SYSTEM_PRIORITY_CLASSES


def refusal(pod: Mapping[str, Any], purpose: Purpose) -> str | None:
    """Why this pod must not be deleted for `purpose`, or None when it may be."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = metadata.get("labels") or {}
    where = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    if labels.get(names.MANAGED) != "true":
        return f"pod {where} was not created by caldera"
    if metadata.get("namespace") == names.KUBE_SYSTEM:
        return f"pod {where} is in kube-system"
    if purpose is not Purpose.EVICT:
        return None
    priority = spec.get("priority")
    if (
        (isinstance(priority, int) and priority >= CRITICAL_PRIORITY)
        or spec.get("priorityClassName") in _CRITICAL_CLASSES
        or labels.get(names.JOB_TYPE) == JobType.CRITICAL.value
    ):
        return f"pod {where} is critical"
    if labels.get(names.PROTECTED) == "true" or labels.get("protected") == "true":
        return f"pod {where} is protected"
    if labels.get("caldera.io/system") == "true":
        return f"pod {where} is a system pod"
    return None
