"""The TrainingJob API as its users and the controller both speak it: the resource's group,
version, kind and plural, the labels and annotations caldera writes on what it creates, the
manifest a submission sends, and reaching the API server with a kubeconfig.

It lives here, below `caldera.k8s`, because the SDK (`caldera.sdk.kube`) needs these words
too and importing anything under `caldera.k8s` loads the whole controller (its package root
imports the runtime). The controller's modules import the words from here (`caldera.k8s.names`
keeps only the keys and names of its own); `caldera.k8s.crd.training_job` and
`caldera.k8s.cluster.client.load_api_client` still offer the rest where they always did.
`tests/test_import_direction.py` keeps the SDK off `caldera.k8s`.

The `kubernetes` client is imported only when a connection is made: it is slow to import,
and the names and the manifest need none of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from caldera.errors import ClusterError
from caldera.model import JobType

__all__ = [
    "API_VERSION",
    "ATTEMPT",
    "CHECKPOINT",
    "DESERVED",
    "GROUP",
    "JOB",
    "JOB_ID",
    "JOB_TYPE",
    "KIND",
    "MANAGED",
    "NOMINATION",
    "PLACEMENT",
    "PLURAL",
    "PROGRESS",
    "PROTECTED",
    "QUEUE",
    "QUEUE_STATE",
    "RANK",
    "TASK",
    "TIME_WINDOWS",
    "VERSION",
    "api_message",
    "kube_configuration",
    "training_job",
]

# -- the job resource ----------------------------------------------------------------------
GROUP = "caldera.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainingJob"
PLURAL = "trainingjobs"

# -- labels --------------------------------------------------------------------------------
MANAGED = "caldera.io/managed"  # "true" on every pod, PodGroup and Service caldera creates
JOB = "caldera.io/job"  # the TrainingJob's name, on everything created for it
JOB_TYPE = "caldera.io/job-type"
QUEUE = "caldera.io/queue"
ATTEMPT = "caldera.io/attempt"
RANK = "caldera.io/rank"
TASK = "caldera.io/task"  # the TrainingJob task (replica group) a pod is a replica of
PROTECTED = "caldera.io/protected"  # informational: protection is read from the job's spec

# -- annotations ---------------------------------------------------------------------------
JOB_ID = "caldera.io/job-id"  # NAMESPACE/NAME: the id the decision core knows the job by
PLACEMENT = "caldera.io/placement"  # a pod's decided node, devices and milli-GPUs (JSON)
NOMINATION = "caldera.io/nomination"  # the reservation a job started in (JSON, node names)
QUEUE_STATE = "caldera.io/queue-state"  # Open / Closing / Closed, on a Volcano Queue
TIME_WINDOWS = "caldera.io/time-windows"  # a queue's windows (JSON), on a Volcano Queue
# On a Volcano Queue whose `deserved` was raised to its guarantee (Volcano wants guarantee
# <= deserved <= capability): caldera's own deserved share (JSON ResourceList; {}: none,
# the weight's).
DESERVED = "caldera.io/deserved"
PROGRESS = "caldera.io/progress"  # written by a job on its own pod: fraction done, 0..1
CHECKPOINT = "caldera.io/checkpoint"  # written by a job on its own pod: {"time": unix}


def training_job(
    name: str,
    command: Sequence[str],
    *,
    image: str | None = None,
    queue: str | None = None,
    type: str = JobType.NORMAL.value,
    tasks: int = 1,
    gpus: float = 1,
    gpu_resource: str = "nvidia.com/gpu",
    min_available: int | None = None,
    env: Mapping[str, str] | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    checkpoint_interval: float | None = None,
    checkpoint_cost: float | None = None,
    topology: Mapping[str, Any] | None = None,
    expected_duration: float | None = None,
    max_retries: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A TrainingJob manifest from the same keywords the service's `caldera submit` takes:
    what the SDK and `caldera k8s submit` create. Whole GPUs go in the container's limits
    (what a Kubernetes user would write); a fraction in the task's `gpus` field."""
    container: dict[str, Any] = {"name": "main", "command": list(command)}
    if image:
        container["image"] = image
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    resources: dict[str, Any] = {}
    whole = gpus >= 1 and float(gpus).is_integer()
    if whole:
        resources["limits"] = {gpu_resource: int(gpus)}
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    if requests:
        resources["requests"] = requests
    if resources:
        container["resources"] = resources
    task: dict[str, Any] = {
        "name": "worker",
        "replicas": tasks,
        "template": {"spec": {"containers": [container]}},
    }
    if labels:
        task["template"]["metadata"] = {"labels": dict(labels)}
    if not whole and gpus > 0:
        task["gpus"] = gpus
    spec: dict[str, Any] = {"type": type, "tasks": [task]}
    if queue:
        spec["queue"] = queue
    if min_available is not None:
        spec["minAvailable"] = min_available
    if checkpoint_interval is not None or checkpoint_cost is not None:
        spec["checkpoint"] = {
            k: v
            for k, v in (("interval", checkpoint_interval), ("cost", checkpoint_cost))
            if v is not None
        }
    if topology:
        spec["topology"] = {
            "mode": topology.get("mode", "soft"),
            "highestTier": topology.get("highest_tier", topology.get("highestTier", 1)),
        }
    if expected_duration is not None:
        spec["expectedDuration"] = expected_duration
    if max_retries is not None:
        spec["maxRetries"] = max_retries
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def kube_configuration(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A `kubernetes.client.Configuration` from a kubeconfig file, else the in-cluster
    service account, else the default kubeconfig (KUBECONFIG, ~/.kube/config). One-line
    ClusterError otherwise. Callers set their own retries and connection pool on it."""
    import kubernetes
    from kubernetes.config.config_exception import ConfigException

    k8s: Any = kubernetes
    configuration = k8s.client.Configuration()
    try:
        if kubeconfig:
            k8s.config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        else:
            try:
                k8s.config.load_incluster_config(client_configuration=configuration)
            except ConfigException:
                k8s.config.load_kube_config(context=context, client_configuration=configuration)
    except (ConfigException, OSError, ValueError, TypeError) as error:
        where = kubeconfig or "the in-cluster service account or ~/.kube/config"
        text = " ".join(str(error).split()) or error.__class__.__name__
        raise ClusterError(f"cannot load a Kubernetes configuration from {where}: {text}") from None
    return configuration


def api_message(error: Any) -> str:
    """The API server's own words for a refused call (its Status `message`), on one line;
    the HTTP reason when the body has none. `error`: a `kubernetes` ApiException."""
    try:
        body = json.loads(error.body or "")
        text = str(body.get("message") or "")
    except (ValueError, AttributeError):
        text = ""
    return " ".join((text or str(error.reason or "")).split())
