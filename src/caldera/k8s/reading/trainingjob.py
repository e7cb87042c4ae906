"""A `TrainingJob` read as caldera's request: one `JobSpec` and the pod templates of its tasks.

The TrainingJob's keys resolve into the request record every front end builds
(`caldera.runtime.requests.RequestRecord`), whose `spec` is the one conversion to a `JobSpec`.

The API server has already checked the object's shape (the CRD's OpenAPI schema and CEL
rules) and, where caldera's ValidatingAdmissionPolicy is installed, who may submit what.
This module checks again what the controller relies on, so a cluster without the policy
is no less safe, and says in one line why a job cannot run:

- the namespace is one the operator bound (`kubernetes.namespaces`, never kube-system) and
  the queue one its binding allows (a job naming none gets the namespace's default);
- `critical` only in a namespace whose binding allows it (which *users* may is the API
  server's check: `caldera.k8s.access.admission`);
- the pod templates ask for nothing their submitter could not do alone (`template_problem`:
  host namespaces, hostPath, privileged containers, added capabilities, host ports, a
  service account the binding does not list — issue 9, defect 8; root, procMount,
  unconfined seccomp or AppArmor, a runtimeClassName, unsafe sysctls — issue 34; and at
  the `restricted` level, what contradicts it:
  `caldera.k8s.reading.podtemplate.restricted_problem`);
- the tasks are one gang of equal members (caldera's gangs are homogeneous: every replica
  of every task asks for the same GPUs, CPU and memory).

GPUs per replica come from `tasks[].gpus` (fractions allowed for a single replica: the
model's `breaks_fractional_gpu_rule`) or else
from the first container's limit (or request) of the GPU resource, the Kubernetes way; a
MIG slice from `tasks[].gpuProfile`. CPU and memory are the sum of the containers' requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from caldera.errors import RecordError
from caldera.k8s import names
from caldera.k8s.crd import MAX_GPUS, MAX_REPLICAS, MAX_SECONDS, MAX_TASK_GROUPS
from caldera.k8s.effects.render import TaskTemplate, Workload
from caldera.k8s.reading.podtemplate import (
    effective_requests,
    is_gpu_resource,
    restricted_problem,
    shape_problem,
)
from caldera.k8s.settings import KubeSettings, NamespaceBinding, PodSecurity
from caldera.model import (
    GPU_MILLI,
    Checkpointing,
    JobSpec,
    JobType,
    Queue,
    TopologyMode,
    TopologySpec,
    parse_gpu_milli,
    time_share,
)
from caldera.model.jobs import breaks_fractional_gpu_rule
from caldera.runtime.requests import RequestRecord

__all__ = [
    "ADDABLE_CAPABILITY",
    "SAFE_SYSCTLS",
    "Accepted",
    "read_training_job",
    "template_problem",
    "template_references",
]


@dataclass(frozen=True)
class Accepted:
    """A TrainingJob the platform layer may admit: what the cycle sees and what pods run."""

    spec: JobSpec
    workload: Workload
    # The namespace's Secrets, ConfigMaps and PVCs its templates reference
    # (`template_references`): the pods would read them with the controller's rights, so
    # the intake admits them only where the admission policy checked the submitter's.
    references: tuple[str, ...] = ()


# The sysctls Pod Security's baseline profile allows (Kubernetes 1.33).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)


def _kind(profile: Any) -> Any:
    return profile.get("type") if isinstance(profile, Mapping) else None


def _containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
    return [c for c in found if isinstance(c, Mapping)]


# The one capability a container may add (Pod Security: baseline and restricted allow it).
ADDABLE_CAPABILITY = "NET_BIND_SERVICE"


def template_problem(
    template: Mapping[str, Any],
    binding: NamespaceBinding,
    level: PodSecurity = PodSecurity.RESTRICTED,
) -> str | None:
    """Why a pod template asks for more than its submitter could do alone, or more than the
    served namespaces' Pod Security `level` allows, or None.

    The same rules as the admission policy's (`caldera.k8s.access.admission`)."""
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
        added = capabilities.get("add") if isinstance(capabilities, Mapping) else None
        if (
            security.get("privileged")
            or security.get("allowPrivilegeEscalation")
            or any(c != ADDABLE_CAPABILITY for c in (added if isinstance(added, list) else []))
        ):
            return (
                "a pod template may not run a privileged container, allow privilege "
                f"escalation or add a capability other than {ADDABLE_CAPABILITY}"
            )
        if any(isinstance(p, Mapping) and "hostPort" in p for p in container.get("ports") or []):
            return "a pod template may not bind a host port"
        if security.get("procMount") not in (None, "Default"):
            return "a pod template may not set procMount (Pod Security: baseline)"
    pod_security = pod_spec.get("securityContext") or {}
    contexts = [
        c
        for c in (pod_security, *(c.get("securityContext") for c in _containers(pod_spec)))
        if isinstance(c, Mapping)
    ]
    if any(c.get("runAsUser") == 0 for c in contexts):
        return "a pod template may not run as root (runAsUser: 0)"
    if any(
        _kind(c.get("seccompProfile")) == "Unconfined"
        or _kind(c.get("appArmorProfile")) == "Unconfined"
        for c in contexts
    ):
        return "a pod template may not run unconfined (seccomp or AppArmor: Pod Security: baseline)"
    if pod_spec.get("runtimeClassName"):
        return "a pod template may not choose a runtimeClassName (the operator's to set)"
    sysctls = pod_security.get("sysctls") if isinstance(pod_security, Mapping) else None
    unsafe = [
        str(s.get("name"))
        for s in sysctls or []
        if isinstance(s, Mapping) and s.get("name") not in SAFE_SYSCTLS
    ]
    if unsafe:
        return f"a pod template may not set the unsafe sysctl {unsafe[0][:64]!r}"
    account = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
    if account and account not in binding.service_accounts:
        allowed = ", ".join(binding.service_accounts)
        return f"a pod template may run only as a service account the operator allows: {allowed}"
    if level is PodSecurity.RESTRICTED:
        return restricted_problem(pod_spec)
    return None


def _name(ref: Any, key: str) -> str:
    value = ref.get(key) if isinstance(ref, Mapping) else None
    return str(value)[:253] if value else "(no name)"


def template_references(template: Mapping[str, Any]) -> list[str]:
    """Each Secret, ConfigMap and PersistentVolumeClaim of the namespace a pod template
    reads, as `kind name` (volumes, projected sources, a CSI volume's secret, env
    `valueFrom` and `envFrom` of every container): what the admission policy checks against
    its submitter's own rights, and what the controller cannot check alone."""
    pod_spec = template.get("spec") or {}
    if not isinstance(pod_spec, Mapping):
        return []
    found: list[str] = []
    for volume in pod_spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        if "secret" in volume:
            found.append(f"secret {_name(volume['secret'], 'secretName')}")
        if "configMap" in volume:
            found.append(f"configmap {_name(volume['configMap'], 'name')}")
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            found.append(f"persistentvolumeclaim {_name(claim, 'claimName')}")
        csi = volume.get("csi")
        if isinstance(csi, Mapping) and "nodePublishSecretRef" in csi:
            found.append(f"secret {_name(csi['nodePublishSecretRef'], 'name')}")
        projected = volume.get("projected")
        sources = projected.get("sources") if isinstance(projected, Mapping) else None
        for source in sources or []:
            if isinstance(source, Mapping) and "secret" in source:
                found.append(f"secret {_name(source['secret'], 'name')}")
            if isinstance(source, Mapping) and "configMap" in source:
                found.append(f"configmap {_name(source['configMap'], 'name')}")
    for container in _containers(pod_spec):
        for entry in container.get("env") or []:
            source = entry.get("valueFrom") if isinstance(entry, Mapping) else None
            if isinstance(source, Mapping) and "secretKeyRef" in source:
                found.append(f"secret {_name(source['secretKeyRef'], 'name')}")
            if isinstance(source, Mapping) and "configMapKeyRef" in source:
                found.append(f"configmap {_name(source['configMapKeyRef'], 'name')}")
        for entry in container.get("envFrom") or []:
            if isinstance(entry, Mapping) and "secretRef" in entry:
                found.append(f"secret {_name(entry['secretRef'], 'name')}")
            if isinstance(entry, Mapping) and "configMapRef" in entry:
                found.append(f"configmap {_name(entry['configMapRef'], 'name')}")
    return found


def _number(value: Any, where: str, low: float, high: float, integer: bool = False) -> float:
    """A number the tenant wrote, checked: a JSON number (not a bool, NaN or infinity)
    within [low, high], whole where `integer`. RecordError in one line otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{where} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or not low <= value <= high:
        raise RecordError(f"{where} must be between {low:g} and {high:g}, not {value!r}")
    if integer and value != int(value):
        raise RecordError(f"{where} must be a whole number, not {value!r}")
    return value


def _task_resources(
    task: Mapping[str, Any], where: str, settings: KubeSettings
) -> tuple[int, int, int]:
    """(milli-GPUs, millicores, MiB) per replica of one task, counted over all its
    containers as the scheduler counts them (`podtemplate.effective_requests`)."""
    template = task.get("template") or {}
    pod_spec = template.get("spec") or {}
    try:
        asks = effective_requests(pod_spec)
    except ValueError as error:  # shape_problem read them already; kept for safety
        raise RecordError(f"{where}: {error}") from None
    profile = task.get("gpuProfile")
    for resource in sorted(asks):
        if resource == settings.gpu_resource and not profile:
            continue
        if is_gpu_resource(resource, settings.gpu_resource, settings.gpu_share.resource):
            if profile:
                raise RecordError(
                    f"{where}: the template asks for {resource} but gpuProfile gives the "
                    "slice: remove it from the template"
                )
            raise RecordError(
                f"{where}: the template asks for {resource}, which caldera does not count: "
                f"ask for {settings.gpu_resource} (whole GPUs) or use gpus / gpuProfile"
            )
    cpu = math.ceil(asks.get("cpu", Fraction(0)) * 1000)
    memory = math.ceil(asks.get("memory", Fraction(0)) / 2**20)
    if profile:
        return 0, cpu, memory
    declared = asks.get(settings.gpu_resource)
    if declared is not None and declared.denominator != 1:
        raise RecordError(
            f"{where}: {settings.gpu_resource} must be a whole number of GPUs "
            "(a fraction goes in the task's gpus)"
        )
    if declared is not None and declared > MAX_GPUS:
        raise RecordError(f"{where}: {declared} {settings.gpu_resource} is more than any node has")
    given = task.get("gpus")
    try:
        from_field = (
            parse_gpu_milli(_number(given, f"{where}.gpus", 0, MAX_GPUS))
            if given is not None
            else None
        )
    except ValueError as error:
        raise RecordError(f"{where}.gpus: {error}") from None
    from_template = int(declared) * GPU_MILLI if declared is not None else None
    if from_template is not None and from_field is not None and from_template != from_field:
        raise RecordError(
            f"{where}: gpus ({given}) disagrees with the containers' {settings.gpu_resource} "
            f"({declared}): give one"
        )
    gpu = from_field if from_field is not None else (from_template or 0)
    return gpu, cpu, memory


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
    """The job a TrainingJob asks for, or RecordError with a one-line reason (whatever
    the tenant wrote into the values it quotes)."""
    try:
        return _read(obj, settings, queues, submit)
    except RecordError as error:
        text = " ".join(str(error).split())
        raise RecordError(text if len(text) <= 300 else f"{text[:297]}...") from None


def _read(
    obj: Mapping[str, Any],
    settings: KubeSettings,
    queues: Mapping[str, Queue],
    submit: float,
) -> Accepted:
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
    references: list[str] = []
    shapes: set[tuple[int, int, int, str | None]] = set()
    tasks_in = spec["tasks"]
    if not isinstance(tasks_in, list) or len(tasks_in) > MAX_TASK_GROUPS:
        raise RecordError(f"spec.tasks must be a list of at most {MAX_TASK_GROUPS} tasks")
    for i, task in enumerate(tasks_in):
        where = f"spec.tasks[{i}]"
        if not isinstance(task, Mapping):
            raise RecordError(f"{where} must be a mapping")
        template = task.get("template") or {}
        if problem := shape_problem(template, f"{where}.template"):
            raise RecordError(problem)
        if problem := template_problem(template, binding, settings.pod_security):
            raise RecordError(problem)
        references.extend(f"{where}.template: {ref}" for ref in template_references(template))
        profile = task.get("gpuProfile")
        if profile is not None and not isinstance(profile, str):
            raise RecordError(f"{where}.gpuProfile must be a string")
        gpu, cpu, memory = _task_resources(task, where, settings)
        shapes.add((gpu, cpu, memory, profile or None))
        replicas = int(_number(task.get("replicas", 1), f"{where}.replicas", 1, MAX_REPLICAS, True))
        task_name = task.get("name")
        if task_name is not None and not isinstance(task_name, str):
            raise RecordError(f"{where}.name must be a string")
        groups.append(TaskTemplate(task_name or f"task{i}", replicas, template))
    if len(shapes) > 1:
        raise RecordError(
            "spec.tasks: every replica must ask for the same GPUs, CPU and memory "
            "(caldera's gangs are homogeneous)"
        )
    gpu, cpu, memory, profile = shapes.pop()
    tasks = sum(group.replicas for group in groups)
    if breaks_fractional_gpu_rule(gpu, tasks):
        raise RecordError("fractional gpus are allowed only for a single replica")
    min_available = int(_number(spec.get("minAvailable", 0), "spec.minAvailable", 0, tasks, True))
    checkpoint = spec.get("checkpoint") or {}
    topology = spec.get("topology")
    models = spec.get("gpuModel")
    if not isinstance(checkpoint, Mapping) or not isinstance(topology, Mapping | None):
        raise RecordError("spec.checkpoint and spec.topology must be mappings")
    if models is not None and not isinstance(models, list):
        raise RecordError("spec.gpuModel must be a list of GPU models")
    for key in ("interval", "cost"):
        if checkpoint.get(key) is not None:
            _number(checkpoint[key], f"spec.checkpoint.{key}", 0, MAX_SECONDS)
    if spec.get("expectedDuration") is not None:
        _number(spec["expectedDuration"], "spec.expectedDuration", 0, MAX_SECONDS)
    _number(spec.get("maxRetries", 0), "spec.maxRetries", 0, 100, True)
    try:
        request = RequestRecord(
            name=name,
            queue=queue,
            type=job_type,
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
            gpu_models=tuple(str(m) for m in models) if models else None,
            max_retries=int(spec.get("maxRetries") or 0),
            gpu_profile=profile,
        )
        # The one request -> JobSpec conversion; a TrainingJob's user is its namespace.
        job = request.spec(names.job_id(namespace, name), submit, user=namespace)
    except ValueError as error:
        raise RecordError(f"spec: {error}") from None
    job = time_share(job, queues.get(queue))
    workload = Workload(groups=tuple(groups))
    return Accepted(job, workload, tuple(references))
