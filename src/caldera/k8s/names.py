"""The Volcano annotations, reserved keys and object names caldera uses on a cluster.

One module so that the renderer, the runtime, the guard and the docs agree on every key
(the TrainingJob API's group, caldera's labels and annotations: `caldera.trainingjob_api`).
Labels are what selectors read (which pods are caldera's, which job a pod belongs to);
annotations carry what does not fit a label value (job ids with a slash, JSON placements,
the reservation a job started in).
"""

from __future__ import annotations

import re

# The keys `RESERVED_KEYS` lists; every module imports these words from
# `caldera.trainingjob_api` itself.
from caldera.trainingjob_api import (
    ATTEMPT,
    CHECKPOINT,
    JOB,
    JOB_ID,
    JOB_TYPE,
    MANAGED,
    NOMINATION,
    PLACEMENT,
    PROGRESS,
    PROTECTED,
    QUEUE,
    RANK,
    TASK,
)

__all__ = [
    "GROUP_NAME",
    "KUBE_SYSTEM",
    "POLICY_NAME",
    "REPORT_POLICY_NAME",
    "RESERVED_KEYS",
    "RESERVED_PREFIXES",
    "STATE_CONFIG_MAP",
    "VOLCANO_PREEMPTABLE",
    "job_id",
    "name_problem",
    "pod_group_name",
    "pod_name",
    "split_job_id",
]

# The job resource (GROUP … PLURAL), caldera's labels (MANAGED … PROTECTED) and its own
# annotations (JOB_ID … CHECKPOINT) are `caldera.trainingjob_api`'s, which the SDK shares
# without loading the controller; every module imports them from there. Here: what only the
# controller and the renderer use.

# Label and annotation prefixes a user's pod template may not set: the ones schedulers read
# (a template label `volcano.sh/preemptable` would change what happens to the pod); caldera's
# own keys are `RESERVED_KEYS` below. Stripped from templates.
RESERVED_PREFIXES = ("volcano.sh/", "scheduling.k8s.io/", "scheduling.volcano.sh/")

# -- Volcano's annotations -----------------------------------------------------------------
GROUP_NAME = "scheduling.k8s.io/group-name"  # Volcano: the PodGroup a pod belongs to
VOLCANO_PREEMPTABLE = "volcano.sh/preemptable"  # Volcano: "false" keeps its own preempt off

# Every key above: a template that set one could pass its pod off as another job's, as
# protected, or as having checkpointed (issue 10, defect 2). Stripped from templates.
RESERVED_KEYS = frozenset(
    {
        MANAGED,
        JOB,
        JOB_TYPE,
        QUEUE,
        ATTEMPT,
        RANK,
        TASK,
        PROTECTED,
        JOB_ID,
        PLACEMENT,
        NOMINATION,
        PROGRESS,
        CHECKPOINT,
        "protected",
        "caldera.io/system",
    }
)

# -- objects -------------------------------------------------------------------------------
POLICY_NAME = "caldera-trainingjobs"  # the ValidatingAdmissionPolicy on TrainingJob creates
REPORT_POLICY_NAME = "caldera-pod-reports"  # the one on updates of caldera's pods
STATE_CONFIG_MAP = "caldera-state"  # queue waiting modes (throttles), in the state namespace
KUBE_SYSTEM = "kube-system"

# A job name becomes a pod hostname prefix and a Service name: a DNS-1123 label, short
# enough that "-<attempt>-<rank>" and the Service's DNS name still fit in 63 characters.
_MAX_NAME = 40
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def name_problem(name: str) -> str | None:
    """Why a TrainingJob's name cannot be a caldera job name, or None when it can."""
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
