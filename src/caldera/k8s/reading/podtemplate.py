"""A tenant's pod template, checked once at intake: nesting, known fields, resources.

A TrainingJob's `tasks[].template` is stored by the API server as the tenant wrote it (the
CRD keeps unknown fields there: a full PodTemplateSpec schema would be megabytes). What the
controller later does with it — copy it, render a pod from it, send it — must never fail
for one tenant's template, so everything it relies on is checked here, before the job is
admitted (issue 34):

- **nesting** (`nesting_problem`): at most `MAX_DEPTH` levels and `MAX_VALUES` values,
  walked with an explicit stack (a recursive walk is what a 1,100-level template broke);
- **known fields** (`shape_problem`): the template, its metadata, the pod spec, each
  container and its `resources` may name only fields Kubernetes defines (a field it does not
  know, `template.spec.x-deep`, is refused with its path: the job was written for another
  API); lists are lists of objects, env entries have names;
- **resources** (`effective_requests`): each resource a pod asks for, as the scheduler counts
  it — the sum over its containers (and restartable init containers, sidecars), or the
  largest init container with the sidecars started before it, whichever is larger — with
  every quantity read as Kubernetes reads it (`caldera.k8s.reading.quantities.parse_quantity`);
- **GPUs** (`is_gpu_resource`): every extended resource that names a GPU, a MIG slice or a
  GPU share, in any container, is one caldera must count: the TrainingJob reader counts the
  configured GPU resource and refuses the others (`caldera.k8s.reading.trainingjob`). Dynamic
  resource claims (`resourceClaims`, `resources.claims`) and pod-level `resources` or
  `overhead` are refused: caldera could not count what they take.

`caldera.k8s.reading.nodes.pod_requests` counts a running pod with the same `effective_requests`.

Pod Security `restricted` (the default level of served namespaces, `KubeSettings.pod_security`):
`restricted_problem` refuses at intake what contradicts it (a volume type it does not allow,
`runAsNonRoot: false`, a seccomp profile other than RuntimeDefault or Localhost, a dropped
capability list without ALL); `restricted_defaults` fills, on each pod caldera creates, what
the template leaves unset (runAsNonRoot, RuntimeDefault seccomp, no privilege escalation, every
capability dropped), so the pod passes the namespace's Pod Security Admission.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from caldera.k8s.reading.quantities import parse_quantity

__all__ = [
    "CONTAINER_FIELDS",
    "MAX_DEPTH",
    "MAX_VALUES",
    "POD_SPEC_FIELDS",
    "RESTRICTED_VOLUMES",
    "effective_requests",
    "is_gpu_resource",
    "nesting_problem",
    "restricted_defaults",
    "restricted_problem",
    "shape_problem",
    "typed_problem",
]

# Levels below a TrainingJob's template: a real pod template needs about a dozen (affinity
# terms, projected volumes); 1,100 is what broke the JSON decoder's recursion.
MAX_DEPTH = 48
# Values (mappings, lists, scalars) in one template: thousands of env entries fit; a
# template that makes every look at it slow does not.
MAX_VALUES = 50_000

_TEMPLATE_FIELDS = frozenset({"metadata", "spec"})
_METADATA_FIELDS = frozenset({"name", "generateName", "namespace", "labels", "annotations"})
# core/v1 PodSpec, Kubernetes 1.33.
POD_SPEC_FIELDS = frozenset(
    {
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "containers",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "imagePullSecrets",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "os",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "restartPolicy",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
    }
)
# core/v1 Container, Kubernetes 1.33.
CONTAINER_FIELDS = frozenset(
    {
        "args",
        "command",
        "env",
        "envFrom",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "name",
        "ports",
        "readinessProbe",
        "resizePolicy",
        "resources",
        "restartPolicy",
        "securityContext",
        "startupProbe",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    }
)
_RESOURCE_FIELDS = frozenset({"requests", "limits"})
# Pod spec fields caldera cannot count: refused with why.
_UNCOUNTED = {
    "resourceClaims": "dynamic resource claims are not counted by caldera",
    "resources": "pod-level resources are not counted by caldera: set them per container",
    "overhead": "overhead is set by the cluster from a RuntimeClass, not by a template",
    "ephemeralContainers": "ephemeral containers are added to running pods, not templates",
}
_LISTS_OF_OBJECTS = (
    "containers",
    "initContainers",
    "volumes",
    "tolerations",
    "imagePullSecrets",
    "topologySpreadConstraints",
    "hostAliases",
    "readinessGates",
    "schedulingGates",
)


def nesting_problem(value: Any, limit: int = MAX_DEPTH, where: str = "template") -> str | None:
    """Why `value` nests deeper than `limit` levels or holds more than `MAX_VALUES` values,
    or None. Iterative: no depth of input reaches Python's recursion limit."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return f"{where} holds more than {MAX_VALUES} values"
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit and children:
            return f"{where} is nested deeper than {limit} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def _unknown(given: Mapping[str, Any], known: frozenset[str], where: str, kind: str) -> str | None:
    extra = sorted(str(key) for key in given if key not in known)
    if extra:
        return f"{where}: unknown field {extra[0][:64]!r} (not a field of a Kubernetes {kind})"
    return None


def _container_problem(container: Any, where: str) -> str | None:
    if not isinstance(container, Mapping):
        return f"{where} must be an object"
    if problem := _unknown(container, CONTAINER_FIELDS, where, "container"):
        return problem
    name = container.get("name")
    if name is not None and not isinstance(name, str):
        return f"{where}.name must be a string"
    for key in ("env", "ports", "volumeMounts", "envFrom"):
        items = container.get(key)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            return f"{where}.{key} must be a list of objects"
    for i, entry in enumerate(container.get("env") or []):
        if not isinstance(entry.get("name"), str) or not entry["name"]:
            return f"{where}.env[{i}].name must be a non-empty string"
    resources = container.get("resources")
    if resources is None:
        return None
    if not isinstance(resources, Mapping):
        return f"{where}.resources must be an object"
    if resources.get("claims"):
        return f"{where}.resources.claims: dynamic resource claims are not counted by caldera"
    if problem := _unknown(
        resources, _RESOURCE_FIELDS | {"claims"}, f"{where}.resources", "resource list"
    ):
        return problem
    for part in ("requests", "limits"):
        values = resources.get(part)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            return f"{where}.resources.{part} must be an object"
        for key, value in values.items():
            try:
                parse_quantity(value)
            except ValueError as error:
                return f"{where}.resources.{part}[{key}]: {error}"
    return None


def shape_problem(template: Any, where: str = "template") -> str | None:
    """Why `template` is no PodTemplateSpec caldera can run, or None (see the module doc)."""
    if not isinstance(template, Mapping):
        return f"{where} must be an object"
    if problem := nesting_problem(template, MAX_DEPTH, where):
        return problem
    if problem := _unknown(template, _TEMPLATE_FIELDS, where, "pod template"):
        return problem
    metadata = template.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            return f"{where}.metadata must be an object"
        if problem := _unknown(
            metadata, _METADATA_FIELDS, f"{where}.metadata", "template's metadata"
        ):
            return problem
        for key in ("labels", "annotations"):
            values = metadata.get(key)
            if values is not None and not isinstance(values, Mapping):
                return f"{where}.metadata.{key} must be an object"
    spec = template.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        return f"{where}.spec must be an object"
    if problem := _unknown(spec, POD_SPEC_FIELDS, f"{where}.spec", "pod spec"):
        return problem
    for key, why in _UNCOUNTED.items():
        if spec.get(key):
            return f"{where}.spec.{key}: {why}"
    for key in _LISTS_OF_OBJECTS:
        items = spec.get(key)
        if items is not None and (
            not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items)
        ):
            return f"{where}.spec.{key} must be a list of objects"
    for key in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(key) or []):
            if problem := _container_problem(container, f"{where}.spec.{key}[{i}]"):
                return problem
    return None


def _asks(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """What one container requests: its requests, and its limits where it set no request
    (Kubernetes defaults a missing request to the limit)."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    merged = {**limits, **requests}
    return {str(key): parse_quantity(value) for key, value in merged.items()}


def effective_requests(pod_spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """Each resource a pod (or pod template) asks for, as kube-scheduler counts it: the
    larger of (its containers' and sidecars' sum) and (each plain init container's own ask
    plus the sidecars started before it). ValueError on a quantity it cannot read."""
    total: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or []:
        for key, amount in _asks(container).items():
            total[key] = total.get(key, Fraction(0)) + amount
    sidecars: dict[str, Fraction] = {}
    peak: dict[str, Fraction] = {}
    for container in pod_spec.get("initContainers") or []:
        asks = _asks(container)
        if container.get("restartPolicy") == "Always":  # a sidecar: runs beside the rest
            for key, amount in asks.items():
                sidecars[key] = sidecars.get(key, Fraction(0)) + amount
                total[key] = total.get(key, Fraction(0)) + amount
            continue
        for key in {*asks, *sidecars}:
            at_once = asks.get(key, Fraction(0)) + sidecars.get(key, Fraction(0))
            peak[key] = max(peak.get(key, Fraction(0)), at_once)
    return {
        key: max(total.get(key, Fraction(0)), peak.get(key, Fraction(0))) for key in {*total, *peak}
    }


def is_gpu_resource(name: str, gpu_resource: str, share_resource: str = "") -> bool:
    """Whether an extended resource names a GPU, a MIG slice or a GPU share: the configured
    GPU resource, its share resource, anything else of its vendor (nvidia.com/mig-1g.10gb,
    nvidia.com/gpu.shared), and any other vendor's GPU (amd.com/gpu, gpu.intel.com/i915)."""
    if name in (gpu_resource, share_resource):
        return True
    if "/" not in name:
        return False
    domain, resource = name.split("/", 1)
    vendor = gpu_resource.split("/", 1)[0] if "/" in gpu_resource else ""
    return (
        domain == vendor
        or "gpu" in domain.lower()
        or "gpu" in resource.lower()
        or resource.startswith("mig-")
    )


def typed_problem(template: Mapping[str, Any], where: str = "template") -> str | None:
    """What the Kubernetes client's typed PodTemplateSpec refuses in `template` (a number
    where a string belongs, a field it does not know), as one line; None when it takes it,
    or when the installed client has no typed models (before its pydantic models, it sent
    whatever it was given and the API server judged). The controller sends pods through
    this client: a template it refuses would fail at every start, so it is refused here,
    once, at intake."""
    try:
        from kubernetes.client import V1PodTemplateSpec
    except ImportError:  # pragma: no cover - the client is a dependency
        return None
    validate = getattr(V1PodTemplateSpec, "model_validate", None)
    if validate is None:
        return None
    try:
        validate(template)
    except Exception as error:  # pydantic's ValidationError, whatever its version
        errors = getattr(error, "errors", None)
        found = errors() if callable(errors) else []
        if found:
            first = found[0]
            path = ".".join(str(part) for part in first.get("loc") or ())
            message = " ".join(str(first.get("msg", "invalid")).split())
            return f"{where}.{path}: {message}"[:300]
        return f"{where}: " + " ".join(str(error).split())[:200]
    return None


# Volume types Pod Security's restricted profile allows (Kubernetes 1.34).
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_SECCOMP_RESTRICTED = frozenset({"RuntimeDefault", "Localhost"})


def _pod_containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
    return [c for c in found if isinstance(c, Mapping)]


def _context(holder: Mapping[str, Any]) -> Mapping[str, Any]:
    context = holder.get("securityContext")
    return context if isinstance(context, Mapping) else {}


def restricted_problem(pod_spec: Any) -> str | None:
    """Why a pod template contradicts Pod Security's `restricted` profile where no default
    can help, as one line, or None (baseline's rules are `caldera.k8s.reading.trainingjob`'s)."""
    if not isinstance(pod_spec, Mapping):
        return None
    for volume in pod_spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        kinds = sorted(str(key) for key in volume if key != "name")
        bad = [kind for kind in kinds if kind not in RESTRICTED_VOLUMES]
        if bad:
            return (
                f"a pod template may not use a {bad[0][:64]} volume (Pod Security: restricted "
                f"allows {', '.join(sorted(RESTRICTED_VOLUMES))})"
            )
    contexts = [_context(pod_spec), *(_context(c) for c in _pod_containers(pod_spec))]
    if any(c.get("runAsNonRoot") is False for c in contexts):
        return "a pod template may not set runAsNonRoot: false (Pod Security: restricted)"
    for context in contexts:
        profile = context.get("seccompProfile")
        kind = profile.get("type") if isinstance(profile, Mapping) else None
        if kind is not None and kind not in _SECCOMP_RESTRICTED:
            return (
                f"a pod template may not use the seccomp profile {str(kind)[:64]!r} "
                "(Pod Security: restricted allows RuntimeDefault or Localhost)"
            )
    for container in _pod_containers(pod_spec):
        capabilities = _context(container).get("capabilities")
        drop = capabilities.get("drop") if isinstance(capabilities, Mapping) else None
        if drop is not None and "ALL" not in (drop if isinstance(drop, list) else []):
            return "a pod template's capabilities.drop must include ALL (Pod Security: restricted)"
    return None


def restricted_defaults(pod_spec: dict[str, Any]) -> None:
    """Fill, in place, what Pod Security's `restricted` profile needs and the template left
    unset: the pod runs as non-root under the runtime's default seccomp profile, and every
    container drops every capability and may not escalate its privileges. What the template
    set is kept (`restricted_problem` refused what contradicts the profile)."""
    pod_context = dict(_context(pod_spec))
    pod_context.setdefault("runAsNonRoot", True)
    pod_context.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    pod_spec["securityContext"] = pod_context
    for key in ("containers", "initContainers"):
        for container in pod_spec.get(key) or []:
            context = dict(_context(container))
            context.setdefault("allowPrivilegeEscalation", False)
            capabilities = dict(context.get("capabilities") or {})
            capabilities.setdefault("drop", ["ALL"])
            context["capabilities"] = capabilities
            container["securityContext"] = context
