"""A `TrainingJob` read as caldera's request: one `JobSpec` and the pod templates of its tasks.

The API server has already checked the object's shape (the CRD's OpenAPI schema and CEL
rules) and, where caldera's ValidatingAdmissionPolicy is installed, who may submit what.
This module checks again what the controller relies on, so a cluster without the policy
is no less safe, and says in one line why a job cannot run:

- the namespace is one the operator bound (`kubernetes.namespaces`, never kube-system) and
  the queue one its binding allows (a job naming none gets the namespace's default);
- `critical` only in a namespace whose binding allows it (which *users* may is the API
  server's check: `caldera.k8s.admission`);
- the pod templates ask for nothing their submitter could not do alone (`template_problem`:
  host namespaces, hostPath, privileged containers, added capabilities, host ports, a
  service account the binding does not list) — issue 9, defect 8;
- the tasks are one gang of equal members (caldera's gangs are homogeneous: every replica
  of every task asks for the same GPUs, CPU and memory).

GPUs per replica come from `tasks[].gpus` (fractions allowed for a single replica) or else
from the first container's limit (or request) of the GPU resource, the Kubernetes way; a
MIG slice from `tasks[].gpuProfile`. CPU and memory are the sum of the containers' requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from caldera.errors import RecordError
from caldera.k8s import names
from caldera.k8s.quantities import parse_count
from caldera.k8s.render import TaskTemplate, Workload
from caldera.k8s.settings import KubeSettings, NamespaceBinding
from caldera.model import (
    GPU_MILLI,
    Checkpointing,
    JobSpec,
    JobType,
    Queue,
    TopologyMode,
    TopologySpec,
    parse_cpu,
    parse_gpu_milli,
    parse_memory_mib,
    time_share,
)

__all__ = ["Accepted", "read_training_job", "template_problem"]


@dataclass(frozen=True)
class Accepted:
    """A TrainingJob the platform layer may admit: what the cycle sees and what pods run."""

    spec: JobSpec
    workload: Workload


def _containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
    return [c for c in found if isinstance(c, Mapping)]


def template_problem(template: Mapping[str, Any], binding: NamespaceBinding) -> str | None:
    """Why a pod template asks for more than its submitter could do alone, or None.

    The same rules as the admission policy's (`caldera.k8s.admission`)."""
    pod_spec = template.get("spec") or {}
    if not isinstance(pod_spec, Mapping):
        return "template.spec must be a mapping"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(key):
            return "a pod template may not use the host network, PID or IPC namespace"
    if any(isinstance(v, Mapping) and "hostPath" in v for v in pod_spec.get("volumes") or []):
        return "a pod template may not mount a hostPath volume"
    for container in _containers(pod_spec):
        security = container.get("securityContext") or {}
        capabilities = security.get("capabilities") or {}
        if (
            security.get("privileged")
            or security.get("allowPrivilegeEscalation")
            or capabilities.get("add")
        ):
            return (
                "a pod template may not run a privileged container, allow privilege "
                "escalation or add capabilities"
            )
        if any(isinstance(p, Mapping) and "hostPort" in p for p in container.get("ports") or []):
            return "a pod template may not bind a host port"
    account = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
    if account and account not in binding.service_accounts:
        allowed = ", ".join(binding.service_accounts)
        return f"a pod template may run only as a service account the operator allows: {allowed}"
    return None


def _requests(container: Mapping[str, Any], key: str) -> Any:
    resources = container.get("resources") or {}
    for part in ("requests", "limits"):
        value = (resources.get(part) or {}).get(key)
        if value is not None:
            return value
    return None


def _task_gpu(task: Mapping[str, Any], settings: KubeSettings) -> int:
    """Milli-GPUs per replica of one task."""
    template = task.get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or [{}]
    first = containers[0] if isinstance(containers[0], Mapping) else {}
    resources = first.get("resources") or {}
    declared = (resources.get("limits") or {}).get(settings.gpu_resource)
    if declared is None:
        declared = (resources.get("requests") or {}).get(settings.gpu_resource)
    given = task.get("gpus")
    try:
        from_template = parse_gpu_milli(parse_count(declared)) if declared is not None else None
        from_field = parse_gpu_milli(float(given)) if given is not None else None
    except (ValueError, TypeError) as error:
        raise RecordError(f"tasks: {error}") from None
    if from_template is not None and from_field is not None and from_template != from_field:
        raise RecordError(
            f"tasks: gpus ({given}) disagrees with the container's {settings.gpu_resource} "
            f"({declared}): give one"
        )
    if from_field is not None:
        return from_field
    return from_template or 0


def _task_cpu_memory(task: Mapping[str, Any]) -> tuple[int, int]:
    template = task.get("template") or {}
    containers = [
        c for c in (template.get("spec") or {}).get("containers") or [] if isinstance(c, Mapping)
    ]
    cpu = memory = 0
    try:
        for container in containers:
            if (value := _requests(container, "cpu")) is not None:
                cpu += parse_cpu(value)
            if (value := _requests(container, "memory")) is not None:
                memory += parse_memory_mib(str(value) if isinstance(value, int) else value)
    except ValueError as error:
        raise RecordError(f"tasks: {error}") from None
    return cpu, memory


def _queue(spec: Mapping[str, Any], namespace: str, binding: NamespaceBinding) -> str:
    queue = str(spec.get("queue") or binding.default_queue)
    if queue not in binding.queues:
        allowed = ", ".join(binding.queues)
        raise RecordError(
            f"queue {queue} is not bound to namespace {namespace} (allowed: {allowed})"
        )
    return queue


def read_training_job(
    obj: Mapping[str, Any],
    settings: KubeSettings,
    queues: Mapping[str, Queue],
    submit: float,
) -> Accepted:
    """The job a TrainingJob asks for, or RecordError with a one-line reason."""
    metadata = obj.get("metadata") or {}
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    binding = settings.binding(namespace)
    if binding is None:
        raise RecordError(f"caldera serves no jobs in namespace {namespace}")
    if problem := names.name_problem(name):
        raise RecordError(problem)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or not spec.get("tasks"):
        raise RecordError("spec.tasks: at least one task is needed")
    try:
        job_type = JobType(spec.get("type") or JobType.NORMAL.value)
    except ValueError:
        raise RecordError(f"spec.type: unknown job type {spec.get('type')!r}") from None
    if job_type is JobType.CRITICAL and not binding.critical:
        raise RecordError(
            f"namespace {namespace} may not submit critical jobs "
            f"(kubernetes.namespaces.{namespace}.critical)"
        )
    queue = _queue(spec, namespace, binding)
    groups: list[TaskTemplate] = []
    shapes: set[tuple[int, int, int, str | None]] = set()
    for i, task in enumerate(spec["tasks"]):
        if not isinstance(task, Mapping):
            raise RecordError(f"spec.tasks[{i}] must be a mapping")
        template = task.get("template") or {}
        if not isinstance(template, Mapping):
            raise RecordError(f"spec.tasks[{i}].template must be a mapping")
        if problem := template_problem(template, binding):
            raise RecordError(problem)
        profile = task.get("gpuProfile")
        gpu = 0 if profile else _task_gpu(task, settings)
        cpu, memory = _task_cpu_memory(task)
        shapes.add((gpu, cpu, memory, str(profile) if profile else None))
        replicas = int(task.get("replicas") or 1)
        groups.append(TaskTemplate(str(task.get("name") or f"task{i}"), replicas, template))
    if len(shapes) > 1:
        raise RecordError(
            "spec.tasks: every replica must ask for the same GPUs, CPU and memory "
            "(caldera's gangs are homogeneous)"
        )
    gpu, cpu, memory, profile = shapes.pop()
    tasks = sum(group.replicas for group in groups)
    if 0 < gpu < GPU_MILLI and tasks != 1:
        raise RecordError("fractional gpus are allowed only for a single replica")
    min_available = int(spec.get("minAvailable") or 0)
    if min_available > tasks:
        raise RecordError(f"minAvailable ({min_available}) exceeds the replicas ({tasks})")
    checkpoint = spec.get("checkpoint") or {}
    topology = spec.get("topology")
    models = spec.get("gpuModel")
    try:
        job = JobSpec(
            id=names.job_id(namespace, name),
            name=name,
            queue=queue,
            type=job_type,
            submit=submit,
            tasks=tasks,
            gpu=gpu,
            cpu=cpu,
            memory=memory,
            min_available=min_available,
            labels={"protected": "true"} if spec.get("protected") else {},
            namespace=namespace,
            checkpoint=Checkpointing(
                checkpoint.get("interval"),
                float(checkpoint.get("cost") or 0.0),
                bool(checkpoint.get("onSigterm", True)),
            ),
            expected_duration=spec.get("expectedDuration"),
            topology=(
                TopologySpec(
                    TopologyMode(topology.get("mode", "soft")), int(topology.get("highestTier", 1))
                )
                if topology
                else None
            ),
            gpu_models=frozenset(str(m) for m in models) if models else None,
            max_retries=int(spec.get("maxRetries") or 0),
            user=namespace,
            gpu_profile=profile,
        )
    except ValueError as error:
        raise RecordError(f"spec: {error}") from None
    job = time_share(job, queues.get(queue))
    workload = Workload(groups=tuple(groups))
    return Accepted(job, workload)
