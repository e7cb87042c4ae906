"""The Kubernetes runtime (DESIGN §1, §7): caldera's decision core driving a cluster that
runs the Volcano batch scheduler.

- `render`: PriorityClasses, Volcano Queues, and a started job's PodGroup + pinned Pods;
- `KubeRuntime`: reads nodes, job records and pods, runs the cycle, applies its decisions;
- `ClusterAPI`: the one seam to a cluster — `caldera.k8s.client.KubeClusterAPI` (the
  official `kubernetes` client) and `FakeCluster` (in memory, for tests);
- `caldera.k8s.controller.Controller`: the loop (watches, wake-ups, resync) behind
  `caldera k8s run`; `caldera.k8s.plan`: what `caldera k8s render` prints.

The package root does not import the `kubernetes` client (slow to import); `client` does.
See docs/kubernetes.md.
"""

from caldera.k8s.api import (
    ClusterAPI,
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    Forbidden,
    Invalid,
    VolcanoMissing,
)
from caldera.k8s.fake import FakeClock, FakeCluster
from caldera.k8s.guard import Purpose, refusal
from caldera.k8s.nodes import Blocked, NodeState, foreign_usage, read_nodes
from caldera.k8s.records import JobRequest, KubeJob, KubeTask, RecordError
from caldera.k8s.render import (
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
from caldera.k8s.runtime import KubeRuntime, KubeStats
from caldera.k8s.settings import GpuShare, KubeSettings, NodeLabels

__all__ = [
    "Blocked",
    "ClusterAPI",
    "ClusterConflict",
    "ClusterError",
    "ClusterUnavailable",
    "FakeClock",
    "FakeCluster",
    "Forbidden",
    "GpuShare",
    "Invalid",
    "JobRequest",
    "KubeJob",
    "KubeRuntime",
    "KubeSettings",
    "KubeStats",
    "KubeTask",
    "NodeLabels",
    "NodeState",
    "Owner",
    "Purpose",
    "RecordError",
    "RenderError",
    "VolcanoMissing",
    "Workload",
    "foreign_usage",
    "job_service",
    "pod_group",
    "priority_classes",
    "queue_from_volcano",
    "read_nodes",
    "refusal",
    "render_start",
    "task_pod",
    "to_yaml",
    "volcano_queue",
]
