"""Manifests from caldera's model: a started job's Pods and Service here, and (re-exported
from `caldera.k8s.effects.volcano_objects`) the PriorityClasses, Volcano Queues and the job's
PodGroup. Pure functions: the same input renders the same objects, every time.

Why PodGroup + Pods and not a Volcano Job (`batch.volcano.sh/v1alpha1`)? caldera decides
per task where it runs, which tasks give way and when a gang grows; a Volcano Job has its
own controller that would fight every one of those decisions:
- the Job controller re-creates a pod caldera deleted (that is what its `replicas` mean), so
  evicting only the tasks above `min_available` would undo itself, and its `policies`
  (PodEvicted → RestartJob) would restart a whole gang caldera evicted on purpose;
- Volcano's admission webhook lets a Job change only `minAvailable` and task `replicas`
  after creation, so tasks cannot be re-pinned or added on newly decided nodes (grow);
- a Volcano Job shares one template per task role, where caldera pins every task to its own
  node and records its own device choice.
A PodGroup is exactly what the Volcano scheduler reads for gang scheduling (`minMember`,
`queue`, `priorityClassName`, `networkTopology`), so with PodGroup + Pods caldera stays the
only controller of its pods, and Volcano still binds each gang all-or-nothing, accounts it
to its queue and refuses to over-commit a node if caldera's view was stale.

Pinning: each pod carries a *required* node affinity on `metadata.name` (the form the
DaemonSet controller uses), not `nodeName`: `nodeName` bypasses the scheduler, so the gang
would not be bound atomically and a pod landing on a node whose room is not free yet would
be rejected by the kubelet instead of waiting. The affinity names one node, so the node
caldera decided is the only node Volcano may choose.

GPUs: whole devices are requested as `gpu_resource` (default `nvidia.com/gpu`); a share of
one device (gpu_milli < 1000) as `settings.gpu_share` (default `volcano.sh/gpu-memory` in MiB
of the node's per-GPU memory); a MIG slice as one of the device plugin's `mixed`-strategy
resource for its profile (`nvidia.com/mig-1g.10gb: 1`, `mig_resource`). The device plugin
picks the physical devices; caldera's device choice (which keeps multi-GPU tasks inside one
NVLink island) is recorded on the pod in `caldera.io/placement` and is what caldera accounts.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from caldera.core import Nomination, TaskPlacement
from caldera.errors import RenderError
from caldera.k8s import names
from caldera.k8s.effects.volcano_objects import (
    SCHEDULING_API,
    VOLCANO_SCHEDULING_API,
    job_labels,
    pod_group,
    priority_classes,
    queue_from_volcano,
    volcano_queue,
)
from caldera.k8s.reading.podtemplate import (
    effective_requests,
    is_gpu_resource,
    restricted_defaults,
    typed_problem,
)
from caldera.k8s.reading.quantities import (
    cpu_quantity,
    memory_quantity,
    mig_resource,
    quantity_text,
)
from caldera.k8s.settings import KubeSettings, PodSecurity
from caldera.model import (
    GPU_MILLI,
    JobSpec,
    Node,
)
from caldera.runtime.wire import ByName, placement_to_wire
from caldera.trainingjob_api import (
    API_VERSION,
    JOB,
    JOB_ID,
    KIND,
    MANAGED,
    PLACEMENT,
    PROTECTED,
    RANK,
    TASK,
)

__all__ = [
    "SCHEDULING_API",
    "VOLCANO_SCHEDULING_API",
    "Owner",
    "RenderError",
    "TaskTemplate",
    "Workload",
    "job_service",
    "mig_resource",
    "pod_group",
    "priority_classes",
    "queue_from_volcano",
    "render_start",
    "task_pod",
    "to_yaml",
    "volcano_queue",
]

# Fields of a user's pod template that decide scheduling: caldera sets them, so a template
# that sets them would make the placement caldera decided not the one that happens.
_SCHEDULING_FIELDS = ("nodeName", "nodeSelector", "schedulerName", "priorityClassName", "priority")


@dataclass(frozen=True, slots=True)
class Owner:
    """The object everything created for a job belongs to (its TrainingJob): deleting the
    job deletes its pods, PodGroup and Service through Kubernetes' garbage collector."""

    name: str
    uid: str
    kind: str = KIND
    api_version: str = API_VERSION

    def reference(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": self.api_version,
                "kind": self.kind,
                "name": self.name,
                "uid": self.uid,
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ]


@dataclass(frozen=True, slots=True)
class TaskTemplate:
    """One task of a TrainingJob: `replicas` pods from one pod template."""

    name: str
    replicas: int
    template: Mapping[str, Any]


@dataclass(frozen=True)
class Workload:
    """What each task runs. A TrainingJob gives `groups` (ranks in order: the first group's
    replicas are ranks 0…); a scenario's job gives an image and a command for every rank."""

    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    template: Mapping[str, Any] | None = None
    groups: tuple[TaskTemplate, ...] = ()

    def group_of(self, rank: int) -> tuple[str, Mapping[str, Any] | None]:
        """The task name and pod template of one rank (ranks past the groups: the last)."""
        first = 0
        for group in self.groups:
            if rank < first + group.replicas:
                return group.name, group.template
            first += group.replicas
        if self.groups:
            return self.groups[-1].name, self.groups[-1].template
        return "", self.template

    def check(self, settings: KubeSettings) -> None:
        """RenderError when no pod could be made from this workload."""
        for i, group in enumerate(self.groups or (TaskTemplate("", 1, self.template or {}),)):
            metadata, pod_spec, _ = _container_base(self, group.template, settings)
            problem = typed_problem(
                {"metadata": metadata, "spec": pod_spec}, f"tasks[{i}].template"
            )
            if problem is not None:
                raise RenderError(problem)


# -- a started job -------------------------------------------------------------------------


def job_service(spec: JobSpec, owner: Owner | None = None) -> dict[str, Any]:
    """A headless Service: task N of a gang is reachable as NAME-N.NAME (MASTER_ADDR)."""
    metadata: dict[str, Any] = {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": {MANAGED: "true", JOB: spec.name},
        "annotations": {JOB_ID: spec.id},
    }
    if owner is not None:
        metadata["ownerReferences"] = owner.reference()
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            "selector": {MANAGED: "true", JOB: spec.name},
            "publishNotReadyAddresses": True,  # rendezvous happens before readiness
        },
    }


def _user_keys(values: Any) -> dict[str, str]:
    """A template's labels or annotations less the ones caldera and schedulers read: a
    template label may not make a pod look protected, another job's, or Volcano's
    (issue 10, defect 2)."""
    if not isinstance(values, Mapping):
        return {}
    return {
        str(key): str(value)
        for key, value in values.items()
        if not str(key).startswith(names.RESERVED_PREFIXES) and str(key) not in names.RESERVED_KEYS
    }


def _container_base(
    workload: Workload, template_in: Mapping[str, Any] | None, settings: KubeSettings
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(template metadata, pod spec, first container) from one pod template, checked."""
    template = copy.deepcopy(dict(template_in or {}))
    unknown = set(template) - {"metadata", "spec"}
    if unknown:
        raise RenderError(f"template: unknown key {sorted(unknown)[0]!r} (metadata, spec)")
    metadata = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    if not isinstance(metadata, dict) or not isinstance(pod_spec, dict):
        raise RenderError("template: metadata and spec must be mappings")
    for key in _SCHEDULING_FIELDS:
        if key in pod_spec:
            raise RenderError(f"template.spec.{key} is set by caldera (it decides placement)")
    if (pod_spec.get("affinity") or {}).get("nodeAffinity") is not None:
        raise RenderError("template.spec.affinity.nodeAffinity is set by caldera")
    containers = pod_spec.get("containers") or [{}]
    if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
        raise RenderError("template.spec.containers must be a list of containers")
    for container in [*containers, *(pod_spec.get("initContainers") or [])]:
        _quantities_as_text(container)
    first = containers[0]
    first.setdefault("name", "task")
    image = workload.image or first.get("image") or settings.image
    if not image:
        raise RenderError("no image: give image in the job, its template, or kubernetes.image")
    first["image"] = image
    if workload.command:
        first["command"] = list(workload.command)
    if workload.args:
        first["args"] = list(workload.args)
    pod_spec["containers"] = containers
    return metadata, pod_spec, first


def _gpu_resources(spec: JobSpec, node: Node, settings: KubeSettings) -> dict[str, str]:
    if spec.gpu_profile is not None:
        return {mig_resource(spec.gpu_profile, settings.gpu_resource): "1"}
    if spec.time_shared:
        # One of N tasks time-sharing a device: the device plugin's time-slicing replicas are
        # advertised as the GPU resource itself (caldera accounts the 1/N).
        return {settings.gpu_resource: "1"}
    if spec.gpu >= GPU_MILLI:
        return {settings.gpu_resource: str(spec.gpu // GPU_MILLI)}
    if spec.gpu <= 0:
        return {}
    share = settings.gpu_share
    if share.unit == "milli":
        return {share.resource: str(spec.gpu)}
    if share.unit == "percent":
        return {settings.gpu_resource: "1", share.resource: str(math.ceil(spec.gpu / 10))}
    if node.gpu_memory <= 0:
        raise RenderError(
            f"node {node.name} has no GPU memory label ({settings.labels.gpu_memory}): "
            f"a {spec.gpu / GPU_MILLI:g} GPU share cannot be given in {share.resource}"
        )
    return {share.resource: str(math.ceil(spec.gpu * node.gpu_memory / GPU_MILLI))}


def _is_gpu(resource: str, settings: KubeSettings) -> bool:
    return is_gpu_resource(resource, settings.gpu_resource, settings.gpu_share.resource)


def _resource_parts(container: Any) -> Iterator[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(resources, "requests" or "limits", its values) of a template container, where set."""
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, dict):
            yield resources, part, values


def _quantities_as_text(container: Any) -> None:
    """Requests and limits in the wire form (strings): a tenant's unquoted `cpu: 4` is a
    valid manifest, and the client's typed Pod refuses a number there (issue 34)."""
    for resources, part, values in list(_resource_parts(container)):
        try:
            resources[part] = {k: quantity_text(v) for k, v in values.items()}
        except ValueError as error:
            raise RenderError(f"template: {part}: {error}") from None


def _strip_gpus(container: Any, settings: KubeSettings) -> None:
    for resources, part, values in list(_resource_parts(container)):
        resources[part] = {k: v for k, v in values.items() if not _is_gpu(k, settings)}


def _own_split(pod_spec: Mapping[str, Any], spec: JobSpec, settings: KubeSettings) -> bool:
    """Whether the template's containers already ask for exactly the whole GPUs decided,
    split their own way (a sidecar with devices of its own, as the TrainingJob reader
    counted them): then every container keeps its ask as written."""
    if spec.gpu_profile is not None or spec.time_shared or spec.gpu % GPU_MILLI or not spec.gpu:
        return False
    if sum(1 for c in pod_spec.get("containers") or [] if _asks_gpu(c, settings)) < 2:
        return False  # one container: rendered the usual way (limits = requests)
    try:
        asks = effective_requests(pod_spec)
    except ValueError:
        return False
    return asks.get(settings.gpu_resource) == spec.gpu // GPU_MILLI


def _asks_gpu(container: Any, settings: KubeSettings) -> bool:
    resources = (container.get("resources") if isinstance(container, Mapping) else None) or {}
    return any(
        settings.gpu_resource in (resources.get(part) or {}) for part in ("requests", "limits")
    )


def _env_list(env: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": key, "value": value} for key, value in env.items()]


def task_pod(
    spec: JobSpec,
    workload: Workload,
    rank: int,
    placement: TaskPlacement,
    nodes: tuple[Node, ...],
    attempt: int,
    master_rank: int,
    grace_period: float,
    settings: KubeSettings,
    owner: Owner | None = None,
) -> dict[str, Any]:
    """One task's pod, pinned to its decided node, in the job's PodGroup."""
    node = nodes[placement.node]
    task_name, template = workload.group_of(rank)
    template_meta, pod_spec, container = _container_base(workload, template, settings)
    grace = math.ceil(grace_period)
    gang = spec.tasks > 1
    labels = {**_user_keys(template_meta.get("labels")), **job_labels(spec, attempt)}
    labels[RANK] = str(rank)
    if task_name:
        labels[TASK] = task_name
    if spec.protected:
        labels[PROTECTED] = "true"
    annotations = {
        **_user_keys(template_meta.get("annotations")),
        names.GROUP_NAME: names.pod_group_name(spec.name, attempt),
        JOB_ID: spec.id,
        PLACEMENT: json.dumps(
            placement_to_wire(placement, ByName(nodes)), separators=(",", ":"), sort_keys=True
        ),
    }
    if spec.never_a_victim:
        annotations[names.VOLCANO_PREEMPTABLE] = "false"
    metadata: dict[str, Any] = {
        "name": names.pod_name(spec.name, attempt, rank),
        "namespace": spec.namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if owner is not None:
        metadata["ownerReferences"] = owner.reference()
    caldera_env = {
        "CALDERA_JOB_ID": spec.id,
        "CALDERA_JOB_NAME": spec.name,
        "CALDERA_JOB_TYPE": spec.type.value,
        "CALDERA_QUEUE": spec.queue,
        "CALDERA_ATTEMPT": str(attempt),
        "CALDERA_CHECKPOINT_DIR": f"{settings.checkpoint_root.rstrip('/')}/"
        f"{spec.namespace}/{spec.name}",
        "CALDERA_GRACE_PERIOD": f"{grace_period:g}",
        "RANK": str(rank),
        "NODE_RANK": str(rank),
        "WORLD_SIZE": str(spec.tasks),
        "NNODES": str(spec.tasks),
        "MASTER_ADDR": f"{spec.name}-{master_rank}.{spec.name}" if gang else "127.0.0.1",
        "MASTER_PORT": str(settings.master_port),
    }
    if task_name:
        caldera_env["CALDERA_TASK"] = task_name
    if 0 < spec.gpu < GPU_MILLI:
        caldera_env["CALDERA_GPU_FRACTION"] = f"{spec.gpu / GPU_MILLI:g}"
    env = {
        **{e["name"]: e.get("value", "") for e in container.get("env") or [] if "value" in e},
        **dict(workload.env),
        **caldera_env,
    }
    # Entries that take their value from elsewhere (valueFrom) stay as the template wrote them.
    from_refs = [e for e in container.get("env") or [] if "value" not in e and e["name"] not in env]
    container["env"] = _env_list(env) + from_refs
    resources = copy.deepcopy(container.get("resources") or {})
    requests = dict(resources.get("requests") or {})
    limits = dict(resources.get("limits") or {})
    if not _own_split(pod_spec, spec, settings):
        # Caldera asks for the GPUs it decided, in the form it chose, on the first container;
        # no other container keeps a GPU ask (a sidecar's would be devices nobody counted).
        gpu = _gpu_resources(spec, node, settings)
        for other in [*pod_spec["containers"][1:], *(pod_spec.get("initContainers") or [])]:
            _strip_gpus(other, settings)
        for key in [k for k in (*requests, *limits) if _is_gpu(k, settings)]:
            requests.pop(key, None)
            limits.pop(key, None)
        requests.update(gpu)
        limits.update(gpu)  # extended resources must have limits equal to requests
    # CPU and memory: a TrainingJob's containers ask for them (the spec sums them); a job
    # given only totals (a scenario's) gets them on its first container.
    declared = [c.get("resources") or {} for c in pod_spec["containers"]]
    if spec.cpu and not any("cpu" in (r.get("requests") or {}) for r in declared):
        requests["cpu"] = cpu_quantity(spec.cpu)
    if spec.memory and not any("memory" in (r.get("requests") or {}) for r in declared):
        requests["memory"] = memory_quantity(spec.memory)
    resources = {"requests": requests}
    if limits:
        resources["limits"] = limits
    container["resources"] = resources
    affinity = dict(pod_spec.get("affinity") or {})
    affinity["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}
            ]
        }
    }
    pod_spec.update(
        {
            "schedulerName": settings.scheduler_name,
            "priorityClassName": spec.priority_class.name,
            "restartPolicy": "Never",  # caldera retries and requeues whole gangs itself
            "terminationGracePeriodSeconds": grace,
            "affinity": affinity,
        }
    )
    if gang:
        pod_spec["hostname"] = f"{spec.name}-{rank}"
        pod_spec["subdomain"] = spec.name
    if settings.pod_security is PodSecurity.RESTRICTED:
        restricted_defaults(pod_spec)  # the served namespaces' Pod Security Admission level
    ordered = {key: pod_spec[key] for key in sorted(pod_spec)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": ordered}


def render_start(
    spec: JobSpec,
    workload: Workload,
    placement: Sequence[TaskPlacement],
    nodes: tuple[Node, ...],
    attempt: int,
    grace_period: float,
    settings: KubeSettings,
    first_rank: int = 0,
    master_rank: int = 0,
    owner: Owner | None = None,
    started_under: Nomination | None = None,
    grow: bool = False,
) -> list[dict[str, Any]]:
    """Everything a start creates, in creation order: the Service (gangs only) and the
    PodGroup (not when a running job grows), then one pod per task."""
    objects: list[dict[str, Any]] = []
    if not grow:
        if spec.tasks > 1:
            objects.append(job_service(spec, owner))
        objects.append(pod_group(spec, attempt, owner, started_under, nodes, settings))
    for i, task in enumerate(placement):
        objects.append(
            task_pod(
                spec,
                workload,
                first_rank + i,
                task,
                nodes,
                attempt,
                master_rank,
                grace_period,
                settings,
                owner,
            )
        )
    return objects


def to_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """Objects as one YAML stream (`---` between documents), keys in the order built."""
    return yaml.safe_dump_all(
        [dict(o) for o in objects], sort_keys=False, default_flow_style=False, width=100
    )
