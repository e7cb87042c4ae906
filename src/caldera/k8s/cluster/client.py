"""`KubeClusterAPI`: the `ClusterAPI` seam on the official `kubernetes` Python client.

CoreV1Api for nodes, pods (and their evictions), Services, Events and the state ConfigMap;
CustomObjectsApi for caldera's TrainingJobs (and their status subresource) and Volcano's
`scheduling.volcano.sh/v1beta1` Queues and PodGroups; SchedulingV1Api for PriorityClasses.
Responses are read raw (`_preload_content=False`) and decoded as JSON, so the runtime sees
exactly what the API server sent — the same dicts `FakeCluster` hands out — without the
client's model classes in between. Requests are the client's own: paths, query parameters,
bodies and headers are whatever it builds (tests check them against a local HTTP stub).

What the client does not do by itself:
- patches are sent as `application/merge-patch+json` (the client would otherwise pick JSON
  Patch, which wants a list of operations);
- the rest (timeouts, asking a busy server again, failures as one-line `ClusterError`s) is
  `caldera.k8s.cluster.transport.ApiTransport`'s, this class's base.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import kubernetes

from caldera.errors import NotFound
from caldera.k8s.cluster.api import (
    ClusterConflict,
    Invalid,
    Object,
    VolcanoMissing,
)
from caldera.k8s.cluster.listwatch import Expired, ListWatch
from caldera.k8s.cluster.transport import (
    POOL,
    VOLCANO_GROUP,
    VOLCANO_VERSION,
    load_api_client,
)
from caldera.trainingjob_api import GROUP, KIND, PLURAL, VERSION

__all__ = ["POOL", "Expired", "KubeClusterAPI", "load_api_client"]

_MERGE_PATCH = "application/merge-patch+json"
QUEUE_CONFLICT_TRIES = 5  # read-merge-replace rounds of apply_queue against a concurrent writer

# The client's signatures name its model classes (V1Pod, V1DeleteOptions, …); caldera sends
# the same objects as plain dicts in wire form, which the client serialises as they are.
watch: Any = kubernetes.watch


class KubeClusterAPI(ListWatch):
    """Implements `ClusterAPI` against a real API server (each call through `ApiTransport`;
    lists and watches for the informer cache from `ListWatch`)."""

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None = None, context: str | None = None, timeout: float = 30.0
    ) -> KubeClusterAPI:
        return cls(load_api_client(kubeconfig, context), timeout)

    # -- ClusterAPI --------------------------------------------------------------------------

    def check(self, namespaces: Sequence[str]) -> None:
        t = self.timeout
        self._send(
            "GET /version",
            lambda: self.version.get_code(_request_timeout=t, _preload_content=False),
        )
        self._send(
            "list nodes",
            lambda: self.core.list_node(limit=1, _request_timeout=t, _preload_content=False),
        )
        for namespace in namespaces:
            try:
                # Not decoded: the first TrainingJob may be a tenant's deeply nested one, on
                # which the client's own decoder recurses (issue 34: a crash on every start).
                self._send(
                    f"list {PLURAL} in {namespace}",
                    partial(
                        self.custom.list_namespaced_custom_object,
                        GROUP,
                        VERSION,
                        namespace,
                        PLURAL,
                        limit=1,
                        _request_timeout=t,
                        _preload_content=False,
                    ),
                )
            except NotFound:
                raise NotFound(
                    f"the TrainingJob CRD ({PLURAL}.{GROUP}) is not installed on "
                    f"{self.host}: apply `caldera k8s render --crds` first"
                ) from None
        try:
            self._call(
                "list Volcano queues",
                lambda: self.custom.list_cluster_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, "queues", limit=1, _request_timeout=t
                ),
                volcano=True,
            )
            for namespace in namespaces[:1]:
                self._call(
                    "list Volcano podgroups",
                    partial(
                        self.custom.list_namespaced_custom_object,
                        VOLCANO_GROUP,
                        VOLCANO_VERSION,
                        namespace,
                        "podgroups",
                        limit=1,
                        _request_timeout=t,
                    ),
                    volcano=True,
                )
        except NotFound:
            raise VolcanoMissing(
                f"the Volcano CRDs are not installed ({VOLCANO_GROUP}/{VOLCANO_VERSION} "
                f"queues/podgroups not found on {self.host}): install Volcano first"
            ) from None

    def list_nodes(self, label_selector: str = "") -> list[Object]:
        return self._items(
            "list nodes",
            lambda: self.core.list_node(
                label_selector=label_selector or None,
                _request_timeout=self.timeout,
                _preload_content=False,
            ),
        )

    def list_pods(
        self, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        options = {
            "label_selector": label_selector or None,
            "field_selector": field_selector or None,
            "_request_timeout": self.timeout,
            "_preload_content": False,
        }
        if namespace:
            return self._items(
                "list pods", lambda: self.core.list_namespaced_pod(namespace, **options)
            )
        return self._items("list pods", lambda: self.core.list_pod_for_all_namespaces(**options))

    def read_pod(self, namespace: str, name: str) -> Object | None:
        return self._read(
            f"read pod {namespace}/{name}",
            lambda: self.core.read_namespaced_pod(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_pod(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create pod {namespace}/{body['metadata']['name']}",
                lambda: self.core.create_namespaced_pod(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def delete_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        options: Object = {"gracePeriodSeconds": grace_seconds}
        if uid:
            options["preconditions"] = {"uid": uid}
        return self._delete(
            f"delete pod {namespace}/{name}",
            lambda: self.core.delete_namespaced_pod(
                name, namespace, body=options, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def evict_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        options: Object = {"gracePeriodSeconds": grace_seconds}
        if uid:
            options["preconditions"] = {"uid": uid}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }
        try:  # EvictionBlocked when a PodDisruptionBudget says no (a 429 naming the budget)
            self._send(
                f"evict pod {namespace}/{name}",
                lambda: self.core.create_namespaced_pod_eviction(
                    name, namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        except NotFound:
            return False
        return True

    def create_service(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create service {namespace}/{body['metadata']['name']}",
                lambda: self.core.create_namespaced_service(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def delete_service(self, namespace: str, name: str) -> bool:
        return self._delete(
            f"delete service {namespace}/{name}",
            lambda: self.core.delete_namespaced_service(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_pod_group(self, namespace: str, body: Object) -> Object:
        created: Object = self._call(
            f"create podgroup {namespace}/{body['metadata']['name']}",
            lambda: self.custom.create_namespaced_custom_object(
                VOLCANO_GROUP,
                VOLCANO_VERSION,
                namespace,
                "podgroups",
                body,
                _request_timeout=self.timeout,
            ),
            volcano=True,
        )
        return created

    def delete_pod_group(self, namespace: str, name: str) -> bool:
        return self._delete(
            f"delete podgroup {namespace}/{name}",
            lambda: self.custom.delete_namespaced_custom_object(
                VOLCANO_GROUP,
                VOLCANO_VERSION,
                namespace,
                "podgroups",
                name,
                body={"propagationPolicy": "Background"},
                _request_timeout=self.timeout,
            ),
            volcano=True,
        )

    def list_jobs(self, namespace: str) -> list[Object]:
        return self._items(
            f"list {PLURAL} in {namespace}",
            lambda: self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                _request_timeout=self.timeout,
                _preload_content=False,
            ),
        )

    def patch_job_status(self, namespace: str, name: str, status: Object) -> Object:
        patched: Object = self._json(
            self._call(
                f"update the status of {KIND} {namespace}/{name}",
                lambda: self.custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    {"status": status},
                    _content_type=_MERGE_PATCH,
                    _request_timeout=self.timeout,
                    _preload_content=False,
                ),
            )
        )
        return patched

    def create_event(self, namespace: str, body: Object) -> None:
        self._send(
            f"create event in {namespace}",
            lambda: self.core.create_namespaced_event(
                namespace, body, _request_timeout=self.timeout, _preload_content=False
            ),
            retry=False,
        )

    def read_admission_policy(self, name: str) -> tuple[Object | None, Object | None]:
        t = self.timeout
        policy = self._read(
            f"read validatingadmissionpolicy {name}",
            lambda: self.admission.read_validating_admission_policy(
                name, _request_timeout=t, _preload_content=False
            ),
        )
        binding = self._read(
            f"read validatingadmissionpolicybinding {name}",
            lambda: self.admission.read_validating_admission_policy_binding(
                name, _request_timeout=t, _preload_content=False
            ),
        )
        return policy, binding

    def read_config_map(self, namespace: str, name: str) -> Object | None:
        return self._read(
            f"read configmap {namespace}/{name}",
            lambda: self.core.read_namespaced_config_map(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_config_map(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create configmap {namespace}/{body['metadata']['name']}",
                lambda: self.core.create_namespaced_config_map(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def patch_config_map(self, namespace: str, name: str, patch: Object) -> Object:
        what = f"patch configmap {namespace}/{name}"
        try:
            patched: Object = self._json(
                self._call(
                    what,
                    lambda: self.core.patch_namespaced_config_map(
                        name,
                        namespace,
                        patch,
                        _content_type=_MERGE_PATCH,
                        _request_timeout=self.timeout,
                        _preload_content=False,
                    ),
                )
            )
        except NotFound:
            raise Invalid(f"{what}: not found") from None
        return patched

    # -- leases (leader election) ----------------------------------------------------------

    def read_lease(self, namespace: str, name: str) -> Object | None:
        return self._read(
            f"read lease {namespace}/{name}",
            lambda: self.coordination.read_namespaced_lease(
                name, namespace, _request_timeout=self.timeout, _preload_content=False
            ),
        )

    def create_lease(self, namespace: str, body: Object) -> Object:
        created: Object = self._json(
            self._call(
                f"create lease {namespace}/{body['metadata']['name']}",
                lambda: self.coordination.create_namespaced_lease(
                    namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return created

    def replace_lease(self, namespace: str, name: str, body: Object) -> Object:
        replaced: Object = self._json(
            self._call(
                f"renew lease {namespace}/{name}",
                lambda: self.coordination.replace_namespaced_lease(
                    name, namespace, body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
        )
        return replaced

    def list_queues(self) -> list[Object]:
        found = self._call(
            "list Volcano queues",
            lambda: self.custom.list_cluster_custom_object(
                VOLCANO_GROUP, VOLCANO_VERSION, "queues", _request_timeout=self.timeout
            ),
            volcano=True,
        )
        return list(found.get("items") or [])

    def read_queue(self, name: str) -> Object | None:
        try:
            found: Object = self._json(
                self._call(
                    f"read Volcano queue {name}",
                    lambda: self.custom.get_cluster_custom_object(
                        VOLCANO_GROUP,
                        VOLCANO_VERSION,
                        "queues",
                        name,
                        _request_timeout=self.timeout,
                        _preload_content=False,
                    ),
                    volcano=True,
                )
            )
        except NotFound:
            return None
        return found

    def apply_queue(self, body: Object) -> None:
        # Volcano's queue controller writes the Queue too (its status, right after it is
        # created): a replace made from an older read is refused with 409, so read again.
        for _ in range(QUEUE_CONFLICT_TRIES - 1):
            try:
                return self._apply_queue_once(body)
            except ClusterConflict:
                continue
        return self._apply_queue_once(body)

    def _apply_queue_once(self, body: Object) -> None:
        name = body["metadata"]["name"]
        what = f"queue {name}"
        try:
            existing = self._call(
                f"read {what}",
                lambda: self.custom.get_cluster_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, "queues", name, _request_timeout=self.timeout
                ),
                volcano=True,
            )
        except NotFound:
            self._call(
                f"create {what}",
                lambda: self.custom.create_cluster_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, "queues", body, _request_timeout=self.timeout
                ),
                volcano=True,
            )
            return
        # Replace the spec; keep what others wrote in metadata (labels, annotations).
        metadata = dict(existing.get("metadata") or {})
        for key in ("labels", "annotations"):
            metadata[key] = {**(metadata.get(key) or {}), **(body["metadata"].get(key) or {})}
        replacement = {**body, "metadata": metadata}
        self._call(
            f"replace {what}",
            lambda: self.custom.replace_cluster_custom_object(
                VOLCANO_GROUP,
                VOLCANO_VERSION,
                "queues",
                name,
                replacement,
                _request_timeout=self.timeout,
            ),
            volcano=True,
        )

    def apply_priority_class(self, body: Object) -> None:
        name = body["metadata"]["name"]
        existing = self._read(
            f"read priorityclass {name}",
            lambda: self.scheduling.read_priority_class(
                name, _request_timeout=self.timeout, _preload_content=False
            ),
        )
        if existing is None:
            self._call(
                f"create priorityclass {name}",
                lambda: self.scheduling.create_priority_class(
                    body, _request_timeout=self.timeout, _preload_content=False
                ),
            )
            return
        have = (existing.get("value"), existing.get("preemptionPolicy", "PreemptLowerPriority"))
        want = (body["value"], body.get("preemptionPolicy"))
        if have != want:
            raise ClusterConflict(
                f"PriorityClass {name} exists with value {have[0]} and policy {have[1]}; caldera "
                f"needs {want[0]} and {want[1]} (Kubernetes cannot change them: delete it first)"
            )
