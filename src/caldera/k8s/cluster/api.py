"""The one I/O seam to a cluster: `ClusterAPI`.

Objects cross the seam as plain dicts in the API's wire form (camelCase keys, quantities as
strings), the same shape `kubectl get -o json` prints: the renderer builds them, the runtime
reads them, and the two implementations — `KubeClusterAPI` on the official `kubernetes`
client and `FakeCluster` in memory — agree on them without model classes in between.

Every failure is a `ClusterError` whose message is one line meant for the operator.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from caldera.errors import (
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    EvictionBlocked,
    Forbidden,
    Invalid,
    QuotaExceeded,
    VolcanoMissing,
)

__all__ = [
    "ClusterAPI",
    "ClusterConflict",
    "ClusterError",
    "ClusterUnavailable",
    "EvictionBlocked",
    "Forbidden",
    "Invalid",
    "QuotaExceeded",
    "VolcanoMissing",
    "from_rfc3339",
    "to_rfc3339",
]

Object = dict[str, Any]


def to_rfc3339(t: float) -> str:
    """Unix time as the API writes timestamps (whole seconds, UTC)."""
    return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class ClusterAPI(Protocol):
    """What the Kubernetes runtime needs from a cluster. `namespace=""` lists everywhere."""

    def check(self, namespaces: Sequence[str]) -> None:
        """Raise ClusterUnavailable / VolcanoMissing / Forbidden / NotFound if the controller
        cannot work here; return when the API server, the TrainingJob CRD, the Volcano CRDs
        and the reads it needs in `namespaces` are all there."""
        ...

    def list_nodes(self, label_selector: str = "") -> list[Object]: ...

    def list_pods(
        self, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]: ...

    def read_pod(self, namespace: str, name: str) -> Object | None: ...

    def create_pod(self, namespace: str, body: Object) -> Object: ...

    def delete_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        """Delete with this grace period (SIGTERM now, SIGKILL after). `uid` is a
        precondition: never delete a newer pod that took the name. False if already gone."""
        ...

    def evict_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        """Evict through the Eviction API (PodDisruptionBudgets are honoured, the pod gets
        the DisruptionTarget condition). EvictionBlocked when a budget refuses now; False if
        the pod is already gone."""
        ...

    def create_service(self, namespace: str, body: Object) -> Object: ...

    def delete_service(self, namespace: str, name: str) -> bool: ...

    def create_pod_group(self, namespace: str, body: Object) -> Object: ...

    def delete_pod_group(self, namespace: str, name: str) -> bool: ...

    def list_jobs(self, namespace: str) -> list[Object]:
        """The TrainingJobs of one namespace."""
        ...

    def patch_job_status(self, namespace: str, name: str, status: Object) -> Object:
        """A JSON merge patch of the TrainingJob's status subresource (null deletes).
        NotFound when the job is gone."""
        ...

    def create_event(self, namespace: str, body: Object) -> None: ...

    def read_config_map(self, namespace: str, name: str) -> Object | None: ...

    def read_admission_policy(self, name: str) -> tuple[Object | None, Object | None]:
        """A ValidatingAdmissionPolicy and its binding of the same name (None where
        missing)."""
        ...

    def create_config_map(self, namespace: str, body: Object) -> Object: ...

    def patch_config_map(self, namespace: str, name: str, patch: Object) -> Object:
        """A JSON merge patch (RFC 7386): null deletes a key."""
        ...

    def list_queues(self) -> list[Object]: ...

    def read_queue(self, name: str) -> Object | None:
        """The Volcano Queue (its `status.state` says whether Volcano takes PodGroups for it);
        None when there is none."""
        ...

    def apply_queue(self, body: Object) -> None:
        """Create the Volcano Queue, or replace its spec and caldera's annotations."""
        ...

    def apply_priority_class(self, body: Object) -> None:
        """Create the PriorityClass; refuse (ClusterConflict) when one exists with another value or
        policy, which Kubernetes does not allow to change."""
        ...

    def watch(
        self, kind: str, namespace: str, label_selector: str, timeout_seconds: int
    ) -> Iterator[str]:
        """Event types ("ADDED", "MODIFIED", "DELETED") on `kind` ("pods", "trainingjobs",
        "nodes") until `timeout_seconds` pass; the caller only uses them as a wake-up."""
        ...
