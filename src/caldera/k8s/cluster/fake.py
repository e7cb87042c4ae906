"""An in-memory cluster for fast tests: a small model of the API server, Volcano and kubelets.

- nodes with GPU capacity (allocatable) and labels for topology; Ready or not, cordoned or not;
- pods with phases: created Pending and unbound; bound by `settle()` the way Volcano's gang
  scheduling would — all pending pods of a PodGroup at once, only onto the one node each is
  pinned to, only if the node has the room (pods still terminating keep theirs);
- deletions that honour grace periods on a fake clock: a deleted pod gets a
  deletionTimestamp and goes away when its grace period ends, or earlier if the test said it
  exits on SIGTERM (an emergency checkpoint); a finished pod goes away at once;
- TrainingJobs whose status only the status subresource changes (a status sent with the
  object on create is dropped, as the API server does), Events, the state ConfigMap with
  JSON merge patches, PodGroups, Services, Queues, PriorityClasses;
- evictions through the Eviction API (a test may make one refused, as a
  PodDisruptionBudget would), which mark the pod DisruptionTarget;
- owner references: deleting a job deletes what it owns, pods with their grace period.

It refuses what a real cluster would (a second object with one name, a stale precondition,
a pod pinned to no node) so that runtime bugs fail loudly here first. Every write is logged
in `actions`, every pod deletion in `deletions`, for tests to assert on.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from caldera.errors import NotFound
from caldera.k8s import names
from caldera.k8s.cluster.api import (
    ClusterConflict,
    ClusterUnavailable,
    EvictionBlocked,
    Invalid,
    Object,
    VolcanoMissing,
    to_rfc3339,
)
from caldera.k8s.reading.nodes import pod_requests
from caldera.trainingjob_api import API_VERSION, KIND

__all__ = ["FakeClock", "FakeCluster", "label_selector_matches", "merge_patch"]

_TERMINAL = ("Succeeded", "Failed")


@dataclass
class FakeClock:
    now: float = 1_800_000_000.0  # a Unix time (January 2027)

    def __call__(self) -> float:
        return self.now


def label_selector_matches(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: Mapping[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def field_selector_matches(obj: Mapping[str, Any], selector: str) -> bool:
    """Field selectors as pods support them: `status.phase!=Failed`, `spec.nodeName=n`."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        negate = "!=" in term
        key, value = term.split("!=" if negate else "=", 1)
        actual = _field(obj, key.strip().lstrip("="))
        equal = str(actual if actual is not None else "") == value.strip()
        if equal == negate:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class _Terminating:
    gone_at: float


@dataclass
class FakeCluster:
    """Implements `ClusterAPI` in memory. Advance time with `advance`; `settle` binds and
    removes pods as the clock allows (every read settles first)."""

    clock: FakeClock = field(default_factory=FakeClock)
    volcano: bool = True
    # Volcano's PodGroup webhook (>= 1.12): a PodGroup whose Queue is missing or whose
    # status.state is not Open is refused (400). Queues applied here are Open at once, as
    # vc-controller-manager makes them a moment later; a test closes one by hand.
    volcano_admission: bool = False
    reachable: bool = True
    nodes: dict[str, Object] = field(default_factory=dict)
    pods: dict[tuple[str, str], Object] = field(default_factory=dict)
    jobs: dict[tuple[str, str], Object] = field(default_factory=dict)
    events: list[Object] = field(default_factory=list)
    config_maps: dict[tuple[str, str], Object] = field(default_factory=dict)
    leases: dict[tuple[str, str], Object] = field(default_factory=dict)
    pod_groups: dict[tuple[str, str], Object] = field(default_factory=dict)
    services: dict[tuple[str, str], Object] = field(default_factory=dict)
    queues: dict[str, Object] = field(default_factory=dict)
    priority_classes: dict[str, Object] = field(default_factory=dict)
    # ValidatingAdmissionPolicies and their bindings, by name (not enforced here).
    admission_policies: dict[str, tuple[Object | None, Object | None]] = field(default_factory=dict)
    actions: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, kind, ns/name)
    deletions: list[tuple[str, str, int]] = field(default_factory=list)  # (ns, pod, grace)
    _terminating: dict[tuple[str, str], _Terminating] = field(default_factory=dict)
    _exits: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)
    _sigterm_exit: dict[tuple[str, str], float] = field(default_factory=dict)
    blocked_evictions: set[tuple[str, str]] = field(default_factory=set)  # a PDB says no
    create_errors: list[Exception] = field(default_factory=list)  # the next pod creates fail
    requests: int = 0  # API calls answered (reads and writes)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    # -- building the world (test helpers) -------------------------------------------------

    def add_node(
        self,
        name: str,
        gpus: int = 8,
        model: str = "H100",
        labels: Mapping[str, str] | None = None,
        cpu: str = "128",
        memory: str = "1024Gi",
        ready: bool = True,
        unschedulable: bool = False,
    ) -> Object:
        node: Object = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": self._uid(),
                "labels": {
                    "kubernetes.io/hostname": name,
                    "nvidia.com/gpu.product": model,
                    "nvidia.com/gpu.memory": "81559",
                    **dict(labels or {}),
                },
            },
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "allocatable": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        self.nodes[name] = node
        return node

    def add_foreign_pod(
        self, namespace: str, name: str, node: str, gpus: int = 0, cpu: str = "0"
    ) -> Object:
        """A pod caldera did not create, already running on `node` (e.g. a device plugin)."""
        pod: Object = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": self._uid(), "labels": {}},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "main",
                        "resources": {"requests": {"cpu": cpu, "nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        }
        self.pods[(namespace, name)] = pod
        return pod

    def submit(self, namespace: str, name: str, spec: Mapping[str, Any]) -> Object:
        """Create a TrainingJob, as `kubectl apply` would (a status sent along is dropped)."""
        self._check()
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name},
            "spec": copy.deepcopy(dict(spec)),
        }
        obj = self._create_in(self.jobs, "trainingjob", namespace, body)
        self.jobs[(namespace, name)]["metadata"]["generation"] = 1
        return obj

    def delete_job(self, namespace: str, name: str) -> None:
        """The user deletes a TrainingJob; the garbage collector deletes what it owned."""
        job = self.jobs.pop((namespace, name))
        uid = job["metadata"]["uid"]
        for store in (self.services, self.pod_groups):
            for key in [k for k, o in store.items() if self._owned_by(o, uid)]:
                del store[key]
        for (ns, pod_name), pod in list(self.pods.items()):
            if self._owned_by(pod, uid):
                grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
                self._start_deletion(ns, pod_name, grace)

    def exit_on_sigterm(self, namespace: str, pod: str, after: float) -> None:
        """When deleted, this pod exits `after` seconds later (it wrote its checkpoint)."""
        self._sigterm_exit[(namespace, pod)] = after

    def finish(self, namespace: str, pod: str, exit_code: int = 0, at: float | None = None) -> None:
        """The pod's container exits with `exit_code` now (or at time `at`)."""
        self._exits[(namespace, pod)] = (self.clock.now if at is None else at, exit_code)
        self.settle()

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.settle()

    def pod(self, namespace: str, name: str) -> Object:
        return self.pods[(namespace, name)]

    def job(self, namespace: str, name: str) -> Object:
        return self.jobs[(namespace, name)]

    def events_of(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """(reason, message) of the Events about one TrainingJob, oldest first."""
        return [
            (e["reason"], e["message"])
            for e in self.events
            if e["involvedObject"]["namespace"] == namespace and e["involvedObject"]["name"] == name
        ]

    # -- the cluster's own behaviour --------------------------------------------------------

    @staticmethod
    def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
        return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])

    def _uid(self) -> str:
        return f"uid-{next(self._ids)}"

    def settle(self) -> None:
        now = self.clock.now
        for key, (at, code) in list(self._exits.items()):
            pod = self.pods.get(key)
            if pod is not None and at <= now and pod["status"].get("phase") == "Running":
                self._terminate(pod, code)
                del self._exits[key]
        for key, deletion in list(self._terminating.items()):
            if deletion.gone_at <= now and not self._held(key):
                self.pods.pop(key, None)
                del self._terminating[key]
        self._bind()

    def _terminate(self, pod: Object, code: int) -> None:
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [
            {
                "name": pod["spec"]["containers"][0]["name"],
                "state": {
                    "terminated": {"exitCode": code, "finishedAt": to_rfc3339(self.clock.now)}
                },
            }
        ]

    def _used(self, node: str) -> int:
        """GPUs held on a node by bound pods that have not finished (terminating included)."""
        used = 0
        for pod in self.pods.values():
            if pod["spec"].get("nodeName") == node and pod["status"].get("phase") not in _TERMINAL:
                used += pod_requests(pod, "nvidia.com/gpu")[0]
        return used

    @staticmethod
    def _pinned_node(pod: Mapping[str, Any]) -> str:
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        return str(terms[0]["matchFields"][0]["values"][0])

    def _bind(self) -> None:
        """Volcano's gang binding, reduced to what caldera relies on; a pod for kube-scheduler
        (`default-scheduler`, no PodGroup) is bound on its own."""
        groups: dict[tuple[str, str], list[Object]] = {}
        for (namespace, _), pod in self.pods.items():
            if pod["spec"].get("nodeName") or "deletionTimestamp" in pod["metadata"]:
                continue
            group = pod["metadata"]["annotations"][names.GROUP_NAME]
            groups.setdefault((namespace, group), []).append(pod)
        for key, pending in sorted(groups.items()):
            group = self.pod_groups.get(key)
            alone = all(p["spec"].get("schedulerName") == "default-scheduler" for p in pending)
            if group is None and not alone:
                continue
            members = [
                p
                for (ns, _), p in self.pods.items()
                if ns == key[0] and p["metadata"]["annotations"].get(names.GROUP_NAME) == key[1]
            ]
            if group is not None and len(members) < int(group["spec"]["minMember"]):
                continue
            want: dict[str, int] = {}
            for pod in pending:
                node = self._pinned_node(pod)
                want[node] = want.get(node, 0) + pod_requests(pod, "nvidia.com/gpu")[0]
            fits = all(
                node in self.nodes
                and not self.nodes[node]["spec"].get("unschedulable")
                and self._used(node) + gpus
                <= int(self.nodes[node]["status"]["allocatable"]["nvidia.com/gpu"])
                for node, gpus in want.items()
            )
            if not fits:
                continue
            for pod in pending:
                pod["spec"]["nodeName"] = self._pinned_node(pod)
                pod["status"] = {
                    "phase": "Running",
                    "startTime": to_rfc3339(self.clock.now),
                    "containerStatuses": [
                        {
                            "name": pod["spec"]["containers"][0]["name"],
                            "state": {"running": {"startedAt": to_rfc3339(self.clock.now)}},
                        }
                    ],
                }

    def _held(self, key: tuple[str, str]) -> bool:
        """A finalizer keeps the object after its deletion until someone removes it."""
        pod = self.pods.get(key)
        return pod is not None and bool(pod["metadata"].get("finalizers"))

    def _start_deletion(self, namespace: str, name: str, grace: int) -> None:
        key = (namespace, name)
        pod = self.pods[key]
        now = self.clock.now
        if "deletionTimestamp" in pod["metadata"]:
            if grace == 0:  # a forced delete: the object goes now, unless a finalizer holds it
                self._terminating[key] = _Terminating(now)
            return
        if pod["status"].get("phase") in _TERMINAL or not pod["spec"].get("nodeName") or grace == 0:
            if self._held(key):
                pod["metadata"]["deletionTimestamp"] = to_rfc3339(now)
                self._terminating[key] = _Terminating(now)
                return
            del self.pods[key]  # nothing runs: the object goes at once
            return
        pod["metadata"]["deletionTimestamp"] = to_rfc3339(now + grace)
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        exit_after = self._sigterm_exit.get((namespace, name))
        gone_at = now + grace if exit_after is None else now + min(exit_after, grace)
        if exit_after is not None and exit_after <= grace:
            self._exits[(namespace, name)] = (gone_at, 0)
        self._terminating[(namespace, name)] = _Terminating(gone_at)

    def _check(self) -> None:
        self.requests += 1
        if not self.reachable:
            raise ClusterUnavailable(
                "cannot reach the Kubernetes API at fake://: connection refused"
            )

    def _check_volcano(self) -> None:
        self._check()
        if not self.volcano:
            raise VolcanoMissing(
                "the Volcano CRDs are not installed (scheduling.volcano.sh/v1beta1 "
                "queues/podgroups not found): install Volcano first"
            )

    def _new(self, body: Object, namespace: str | None) -> Object:
        obj = copy.deepcopy(body)
        metadata = obj.setdefault("metadata", {})
        if namespace is not None:
            metadata["namespace"] = namespace
        metadata["uid"] = self._uid()
        metadata["creationTimestamp"] = to_rfc3339(self.clock.now)
        metadata["resourceVersion"] = str(next(self._ids))
        return obj

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> str:
        metadata = obj["metadata"]
        return f"{metadata.get('namespace', '')}/{metadata['name']}".lstrip("/")

    # -- ClusterAPI --------------------------------------------------------------------------

    def check(self, namespaces: Sequence[str]) -> None:
        self._check_volcano()

    def list_nodes(self, label_selector: str = "") -> list[Object]:
        self._check()
        self.settle()
        return [
            copy.deepcopy(n)
            for _, n in sorted(self.nodes.items())
            if label_selector_matches(n["metadata"].get("labels") or {}, label_selector)
        ]

    def list_pods(
        self, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> list[Object]:
        self._check()
        self.settle()
        return [
            copy.deepcopy(p)
            for (ns, _), p in sorted(self.pods.items())
            if (not namespace or ns == namespace)
            and label_selector_matches(p["metadata"].get("labels") or {}, label_selector)
            and field_selector_matches(p, field_selector)
        ]

    def read_pod(self, namespace: str, name: str) -> Object | None:
        self._check()
        self.settle()
        pod = self.pods.get((namespace, name))
        return copy.deepcopy(pod) if pod is not None else None

    def create_pod(self, namespace: str, body: Object) -> Object:
        self._check()
        if self.create_errors:
            raise self.create_errors.pop(0)
        pod = self._new(body, namespace)
        key = (namespace, pod["metadata"]["name"])
        if key in self.pods:
            raise ClusterConflict(f"pods {key[1]!r} already exists")
        try:
            node = self._pinned_node(pod)
        except (KeyError, IndexError, TypeError):
            raise Invalid(f"pod {key[1]} is not pinned to a node by required affinity") from None
        if node not in self.nodes:
            raise Invalid(f"pod {key[1]} is pinned to unknown node {node!r}")
        if names.GROUP_NAME not in pod["metadata"].get("annotations", {}):
            raise Invalid(f"pod {key[1]} names no PodGroup")
        pod.setdefault("status", {})["phase"] = "Pending"
        self.pods[key] = pod
        self.actions.append(("create", "pod", self._key(pod)))
        return copy.deepcopy(pod)

    def delete_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        self._check()
        pod = self.pods.get((namespace, name))
        if pod is None:
            return False
        if uid is not None and pod["metadata"]["uid"] != uid:
            raise ClusterConflict(f"pod {name}: precondition failed (uid changed)")
        self.deletions.append((namespace, name, grace_seconds))
        self.actions.append(("delete", "pod", f"{namespace}/{name}"))
        self._start_deletion(namespace, name, grace_seconds)
        return True

    def evict_pod(
        self, namespace: str, name: str, grace_seconds: int, uid: str | None = None
    ) -> bool:
        self._check()
        pod = self.pods.get((namespace, name))
        if pod is None:
            return False
        if (namespace, name) in self.blocked_evictions:
            raise EvictionBlocked(
                f"evict pod {namespace}/{name}: Cannot evict pod as it would violate the "
                "pod's disruption budget."
            )
        if uid is not None and pod["metadata"]["uid"] != uid:
            raise ClusterConflict(f"pod {name}: precondition failed (uid changed)")
        conditions = pod["status"].setdefault("conditions", [])
        conditions.append(
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
        )
        self.deletions.append((namespace, name, grace_seconds))
        self.actions.append(("evict", "pod", f"{namespace}/{name}"))
        self._start_deletion(namespace, name, grace_seconds)
        return True

    def _create_in(
        self, store: dict[tuple[str, str], Object], kind: str, namespace: str, body: Object
    ) -> Object:
        obj = self._new(body, namespace)
        key = (namespace, obj["metadata"]["name"])
        if key in store:
            raise ClusterConflict(f"{kind} {key[1]!r} already exists")
        store[key] = obj
        self.actions.append(("create", kind, self._key(obj)))
        return copy.deepcopy(obj)

    def _delete_in(
        self, store: dict[tuple[str, str], Object], kind: str, namespace: str, name: str
    ) -> bool:
        self._check()
        if store.pop((namespace, name), None) is None:
            return False
        self.actions.append(("delete", kind, f"{namespace}/{name}"))
        return True

    def create_service(self, namespace: str, body: Object) -> Object:
        self._check()
        return self._create_in(self.services, "service", namespace, body)

    def delete_service(self, namespace: str, name: str) -> bool:
        return self._delete_in(self.services, "service", namespace, name)

    def create_pod_group(self, namespace: str, body: Object) -> Object:
        self._check_volcano()
        if self.volcano_admission:
            queue_name = str((body.get("spec") or {}).get("queue") or "")
            queue = self.queues.get(queue_name)
            if queue is None:
                raise Invalid(
                    f"create podgroup {namespace}/{body['metadata']['name']}: admission "
                    f"webhook denied the request: unable to find queue {queue_name!r}"
                )
            state = (queue.get("status") or {}).get("state", "")
            if state != "Open":
                raise Invalid(
                    f"create podgroup {namespace}/{body['metadata']['name']}: admission "
                    f"webhook denied the request: queue {queue_name} status is {state!r}"
                )
        return self._create_in(self.pod_groups, "podgroup", namespace, body)

    def delete_pod_group(self, namespace: str, name: str) -> bool:
        self._check_volcano()
        return self._delete_in(self.pod_groups, "podgroup", namespace, name)

    def list_jobs(self, namespace: str) -> list[Object]:
        self._check()
        return [copy.deepcopy(j) for (ns, _), j in sorted(self.jobs.items()) if ns == namespace]

    def patch_job_status(self, namespace: str, name: str, status: Object) -> Object:
        self._check()
        key = (namespace, name)
        if key not in self.jobs:
            raise NotFound(f"trainingjob {namespace}/{name}")
        job = self.jobs[key]
        job["status"] = merge_patch(job.get("status") or {}, status)
        job["metadata"]["resourceVersion"] = str(next(self._ids))
        self.actions.append(("patch", "trainingjob/status", f"{namespace}/{name}"))
        return copy.deepcopy(job)

    def create_event(self, namespace: str, body: Object) -> None:
        self._check()
        self.events.append(copy.deepcopy(body))

    def read_admission_policy(self, name: str) -> tuple[Object | None, Object | None]:
        self._check()
        policy, binding = self.admission_policies.get(name, (None, None))
        return copy.deepcopy(policy), copy.deepcopy(binding)

    def read_config_map(self, namespace: str, name: str) -> Object | None:
        self._check()
        found = self.config_maps.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def create_config_map(self, namespace: str, body: Object) -> Object:
        self._check()
        return self._create_in(self.config_maps, "configmap", namespace, body)

    def patch_config_map(self, namespace: str, name: str, patch: Object) -> Object:
        self._check()
        key = (namespace, name)
        if key not in self.config_maps:
            raise Invalid(f"configmap {namespace}/{name} not found")
        patched = merge_patch(self.config_maps[key], patch)
        patched["metadata"]["resourceVersion"] = str(next(self._ids))
        self.config_maps[key] = patched
        self.actions.append(("patch", "configmap", f"{namespace}/{name}"))
        return copy.deepcopy(patched)

    def read_lease(self, namespace: str, name: str) -> Object | None:
        self._check()
        found = self.leases.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def create_lease(self, namespace: str, body: Object) -> Object:
        self._check()
        return self._create_in(self.leases, "lease", namespace, body)

    def replace_lease(self, namespace: str, name: str, body: Object) -> Object:
        """Optimistic concurrency: the body's resourceVersion must be the stored one."""
        self._check()
        stored = self.leases.get((namespace, name))
        if stored is None:
            raise NotFound(f"lease {namespace}/{name}")
        if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            raise ClusterConflict(f"lease {name}: the object has been modified")
        replaced = copy.deepcopy(body)
        replaced["metadata"]["resourceVersion"] = str(next(self._ids))
        self.leases[(namespace, name)] = replaced
        return copy.deepcopy(replaced)

    def list_queues(self) -> list[Object]:
        self._check_volcano()
        return [copy.deepcopy(q) for _, q in sorted(self.queues.items())]

    def apply_queue(self, body: Object) -> None:
        self._check_volcano()
        name = body["metadata"]["name"]
        existing = self.queues.get(name)
        obj = self._new(body, None)
        if existing is not None:
            obj["metadata"]["uid"] = existing["metadata"]["uid"]
        obj["status"] = copy.deepcopy((existing or {}).get("status") or {"state": "Open"})
        self.queues[name] = obj
        self.actions.append(("apply", "queue", name))

    def read_queue(self, name: str) -> Object | None:
        self._check_volcano()
        found = self.queues.get(name)
        return copy.deepcopy(found) if found is not None else None

    def apply_priority_class(self, body: Object) -> None:
        self._check()
        name = body["metadata"]["name"]
        existing = self.priority_classes.get(name)
        if existing is not None:
            if (existing["value"], existing.get("preemptionPolicy")) != (
                body["value"],
                body.get("preemptionPolicy"),
            ):
                raise ClusterConflict(
                    f"PriorityClass {name} exists with value {existing['value']}; caldera "
                    f"needs {body['value']} (values cannot change: delete it first)"
                )
            return
        self.priority_classes[name] = self._new(body, None)
        self.actions.append(("create", "priorityclass", name))

    def watch(
        self, kind: str, namespace: str, label_selector: str, timeout_seconds: int
    ) -> Iterator[str]:
        self._check()
        return iter(())
