"""The labels, annotations and object names caldera uses on a cluster.

One module so that the renderer, the runtime, the guard and the docs agree on every key.
Labels are what selectors read (which pods are caldera's, which record a pod belongs to);
annotations carry what does not fit a label value (job ids with a slash, JSON placements,
nominations, the runtime status of a job record).
"""

from __future__ import annotations

import re

__all__ = [
    "ATTEMPT",
    "CHECKPOINT",
    "GROUP_NAME",
    "JOB",
    "JOB_ID",
    "JOB_RECORD",
    "JOB_TYPE",
    "KUBE_SYSTEM",
    "MANAGED",
    "NOMINATION",
    "PLACEMENT",
    "PROGRESS",
    "PROTECTED",
    "QUEUE",
    "QUEUE_STATE",
    "RANK",
    "RECORD_KEY",
    "STATE",
    "STATE_CONFIG_MAP",
    "STATUS",
    "TIME_WINDOWS",
    "VOLCANO_PREEMPTABLE",
    "job_id",
    "name_problem",
    "pod_group_name",
    "pod_name",
    "split_job_id",
]

# -- labels --------------------------------------------------------------------------------
MANAGED = "caldera.io/managed"  # "true" on every pod, PodGroup and Service caldera creates
JOB_RECORD = "caldera.io/job-record"  # "true" on a ConfigMap that is a job submission
JOB = "caldera.io/job"  # the record's name, on everything created for it
JOB_TYPE = "caldera.io/job-type"
QUEUE = "caldera.io/queue"
STATE = "caldera.io/state"  # on a record: Held, Pending, Running, Releasing, ... (kubectl -l)
ATTEMPT = "caldera.io/attempt"
RANK = "caldera.io/rank"
PROTECTED = "caldera.io/protected"  # "true" on pods of a job labelled protected: "true"

# -- annotations ---------------------------------------------------------------------------
JOB_ID = "caldera.io/job-id"  # NAMESPACE/NAME: the id the decision core knows the job by
PLACEMENT = "caldera.io/placement"  # a pod's decided node, devices and milli-GPUs (JSON)
NOMINATION = "caldera.io/nomination"  # room reserved for a preemptor (JSON, node names)
STATUS = "caldera.io/status"  # a record's runtime state: attempts, work, tasks (JSON)
QUEUE_STATE = "caldera.io/queue-state"  # Open / Closing / Closed, on a Volcano Queue
TIME_WINDOWS = "caldera.io/time-windows"  # a queue's windows (JSON), on a Volcano Queue
PROGRESS = "caldera.io/progress"  # written by a job on its own pod: fraction done, 0..1
CHECKPOINT = "caldera.io/checkpoint"  # written by a job on its own pod: {"time": unix}
GROUP_NAME = "scheduling.k8s.io/group-name"  # Volcano: the PodGroup a pod belongs to
VOLCANO_PREEMPTABLE = "volcano.sh/preemptable"  # Volcano: "false" keeps its own preempt off

# -- objects -------------------------------------------------------------------------------
RECORD_KEY = "job.yaml"  # the record ConfigMap's data key holding the request
STATE_CONFIG_MAP = "caldera-state"  # queue waiting modes (throttles), in the state namespace
KUBE_SYSTEM = "kube-system"

# A record name becomes a pod hostname prefix and a Service name: a DNS-1123 label, short
# enough that "-<attempt>-<rank>" and the Service's DNS name still fit in 63 characters.
_MAX_NAME = 40
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def name_problem(name: str) -> str | None:
    """Why a record name cannot be a caldera job name, or None when it can."""
    if len(name) > _MAX_NAME:
        return f"job name {name!r} is longer than {_MAX_NAME} characters"
    if not _DNS_LABEL.match(name):
        return f"job name {name!r} is not a DNS label (lower-case letters, digits, '-')"
    return None


def job_id(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def split_job_id(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    return namespace, name


def pod_group_name(name: str, attempt: int) -> str:
    """One PodGroup per attempt: a requeued job never reuses a group still being deleted."""
    return f"{name}-{attempt}"


def pod_name(name: str, attempt: int, rank: int) -> str:
    return f"{name}-{attempt}-{rank}"
