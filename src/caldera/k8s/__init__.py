"""The Kubernetes runtime (DESIGN §1, §7): caldera's decision core driving a cluster that
runs the Volcano batch scheduler.

- `crd`: the TrainingJob resource users submit (`caldera.io/v1alpha1`);
- `admission`: RBAC and the ValidatingAdmissionPolicy (who may submit what, where);
- `render`: PriorityClasses, Volcano Queues, and a started job's PodGroup + pinned Pods;
- `KubeRuntime`: reads nodes, TrainingJobs and pods, runs the cycle, applies its decisions
  through the runtime kernel (`caldera.runtime`) and `KubeActuator`;
- `ClusterAPI`: the one seam to a cluster — `caldera.k8s.cluster.client.KubeClusterAPI` (the
  official `kubernetes` client) and `FakeCluster` (in memory, for tests);
- `caldera.k8s.controller.Controller`: the loop (watches, wake-ups, resync) behind
  `caldera k8s run`; `caldera.k8s.effects.plan`: what `caldera k8s render` prints.

The package root does not import the `kubernetes` client (slow to import); `client` does.
See docs/kubernetes.md.
"""

from caldera.k8s.cluster.api import (
    ClusterAPI,
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    EvictionBlocked,
    Forbidden,
    Invalid,
    QuotaExceeded,
    VolcanoMissing,
)
from caldera.k8s.cluster.fake import FakeClock, FakeCluster
from caldera.k8s.effects.guard import Purpose, refusal
from caldera.k8s.effects.render import (
    Owner,
    RenderError,
    Workload,
    job_service,
    pod_group,
    priority_classes,
    queue_from_volcano,
    render_start,
    task_pod,
    to_yaml,
    volcano_queue,
)
from caldera.k8s.jobs import KubeJob, KubeTask
from caldera.k8s.reading.nodes import Blocked, NodeState, foreign_usage, read_nodes
from caldera.k8s.reading.trainingjob import read_training_job
from caldera.k8s.runtime import KubeRuntime, KubeStats
from caldera.k8s.settings import GpuShare, KubeSettings, NamespaceBinding, NodeLabels

__all__ = [
    "Blocked",
    "ClusterAPI",
    "ClusterConflict",
    "ClusterError",
    "ClusterUnavailable",
    "EvictionBlocked",
    "FakeClock",
    "FakeCluster",
    "Forbidden",
    "GpuShare",
    "Invalid",
    "KubeJob",
    "KubeRuntime",
    "KubeSettings",
    "KubeStats",
    "KubeTask",
    "NamespaceBinding",
    "NodeLabels",
    "NodeState",
    "Owner",
    "Purpose",
    "QuotaExceeded",
    "RenderError",
    "VolcanoMissing",
    "Workload",
    "foreign_usage",
    "job_service",
    "pod_group",
    "priority_classes",
    "queue_from_volcano",
    "read_nodes",
    "read_training_job",
    "refusal",
    "render_start",
    "task_pod",
    "to_yaml",
    "volcano_queue",
]
