"""Settings of the Kubernetes runtime: the `kubernetes:` section of a caldera config file.

    kubernetes:
      namespaces:                    # the only namespaces whose TrainingJobs caldera reads
        team-a: {queues: [team-a]}   # the first queue is the default
        serving: {queues: [serving], critical: true, service_accounts: [default, inference]}
      state_namespace: caldera-system
      image: registry.example.com/train:v1    # for records that name none
      gpu_resource: nvidia.com/gpu
      gpu_share: {resource: volcano.sh/gpu-memory, unit: mib}
      labels: {gpu_model: nvidia.com/gpu.product, hypernode: caldera.io/hypernode, ...}
      pod_security: restricted       # or baseline: the Pod Security level of served namespaces

Everything has a default that matches a stock NVIDIA GPU Operator + Volcano cluster, so the
section is optional. The rest of the file is the service's configuration (DESIGN §8): queues
and policy mean the same thing to every runtime.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "NO_POD_GROUPS",
    "RESERVED_NAMESPACES",
    "GpuShare",
    "KubeSettings",
    "KubeSettingsModel",
    "LeaderElection",
    "NamespaceBinding",
    "NodeLabels",
    "PodSecurity",
    "settings_from_model",
    "uses_pod_groups",
]

# Namespaces caldera never reads jobs in nor creates pods in, whatever the configuration says:
# the cluster's own (DESIGN §4.1, conformance) and the API server's.
RESERVED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class PodSecurity(StrEnum):
    """The Pod Security Standard the served namespaces are labelled for (Pod Security
    Admission enforces it on every pod there) and the pods caldera creates must meet:
    the controller fills the `restricted` defaults a template leaves unset and refuses,
    at intake, what contradicts the level (`caldera.k8s.reading.podtemplate`). `baseline` is
    caldera's floor: host namespaces, privileged containers, root and the like are refused
    at either level."""

    BASELINE = "baseline"
    RESTRICTED = "restricted"


@dataclass(frozen=True, slots=True)
class GpuShare:
    """How a fraction of one GPU (gpu_milli < 1000) is requested from the cluster.

    `unit` says how the fraction becomes a quantity of `resource`:
    - `mib`: device memory in MiB (Volcano's GPU share, `volcano.sh/gpu-memory`): the fraction
      of the node's per-GPU memory, so nodes must carry the GPU memory label;
    - `percent`: a percentage of one device (HAMi's `nvidia.com/gpumem-percentage`), together
      with one `gpu_resource` device;
    - `milli`: the milli-GPUs themselves, for a device plugin that advertises milli-GPUs.
    """

    resource: str = "volcano.sh/gpu-memory"
    unit: Literal["mib", "percent", "milli"] = "mib"


@dataclass(frozen=True, slots=True)
class NodeLabels:
    """Node labels that describe GPUs and topology (DESIGN §2: island → node → tier 1 → 2)."""

    gpu_model: str = "nvidia.com/gpu.product"  # set by GPU feature discovery
    gpu_memory: str = "nvidia.com/gpu.memory"  # MiB per GPU, set by GPU feature discovery
    gpu_count: str = "nvidia.com/gpu.count"  # used only when allocatable lacks the resource
    nvlink_island: str = "caldera.io/nvlink-island"  # GPUs per NVLink island (default: all)
    hypernode: str = "caldera.io/hypernode"  # tier-1 domain (leaf switch)
    spine: str = "caldera.io/spine"  # tier-2 domain


@dataclass(frozen=True, slots=True)
class NamespaceBinding:
    """What the operator lets one namespace do (as Kueue's LocalQueue binds a namespace to a
    ClusterQueue): the queues its jobs may name (the first is the default when a job names
    none), whether it may submit `critical` at all (which *users* may is checked by the API
    server: `caldera.k8s.access.admission`), and the service accounts its pods may run as."""

    queues: tuple[str, ...]
    critical: bool = False
    service_accounts: tuple[str, ...] = ("default",)

    @property
    def default_queue(self) -> str:
        return self.queues[0]


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """Leader election on a coordination.k8s.io Lease in `state_namespace` (client-go's
    defaults): replicas renew every `retry_period`; a standby takes over after the leader's
    record has not changed for `lease_duration`; a leader that could not renew for
    `renew_deadline` stops acting (before anyone may take over)."""

    enabled: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


_NO_NAMESPACES: Mapping[str, NamespaceBinding] = MappingProxyType({})


# Schedulers known not to read Volcano's PodGroups: a start behind them creates none (one
# write per start nobody reads, and a cluster without Volcano has no PodGroup CRD), and the
# controller is granted no PodGroup writes. Any other name may be Volcano under another name.
NO_POD_GROUPS = frozenset({"default-scheduler"})


@dataclass(frozen=True, slots=True)
class KubeSettings:
    # The only namespaces whose TrainingJobs caldera reads and where it creates pods.
    namespaces: Mapping[str, NamespaceBinding] = field(default_factory=lambda: _NO_NAMESPACES)
    state_namespace: str = "caldera-system"
    scheduler_name: str = "volcano"
    image: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    gpu_share: GpuShare = field(default_factory=GpuShare)
    labels: NodeLabels = field(default_factory=NodeLabels)
    node_selector: str = ""  # label selector: the nodes caldera schedules on ("" = all)
    checkpoint_root: str = "/checkpoints"  # CALDERA_CHECKPOINT_DIR = root/namespace/name
    master_port: int = 29500
    # Seconds a started job's pods may stay unbound before the start is given up and the job
    # requeued (Volcano disagreed with caldera's view of the node: cordon, taint, a race).
    bind_timeout: float = 300.0
    # Seconds a bound pod may take to run (image pull, init containers) before the start is
    # given up and the job requeued (Kueue's waitForPodsReady): ImagePullBackOff holds no
    # GPUs forever.
    ready_timeout: float = 600.0
    # Seconds a started pod should wait for its bind: caldera starts jobs below critical a
    # binder's worth at a time, as many as keeps the binds it sees within this
    # (`caldera.k8s.pacing`). 0: every start a cycle can make, at once. None: 1.5 in front
    # of kube-scheduler, 4 in front of Volcano (`pacing.bind_wait_of`).
    bind_wait: float | None = None
    # Seconds a pod may stay terminating after its grace period before it is deleted with
    # grace 0 (a node that never confirms); after twice this long the job moves on without it
    # (a finalizer holds it): requeued, the preemptor re-planned, the pod's room still held.
    terminating_timeout: float = 120.0
    resync: float = 30.0  # seconds between two full reconciles when nothing happens
    request_timeout: float = 30.0  # seconds per API request
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    pod_security: PodSecurity = PodSecurity.RESTRICTED

    def binding(self, namespace: str) -> NamespaceBinding | None:
        """The namespace's binding; None where caldera does not serve (never kube-system)."""
        if namespace in RESERVED_NAMESPACES:
            return None
        return self.namespaces.get(namespace)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuShareModel(_Strict):
    resource: str = Field(default="volcano.sh/gpu-memory", min_length=1)
    unit: Literal["mib", "percent", "milli"] = "mib"


class NodeLabelsModel(_Strict):
    gpu_model: str = "nvidia.com/gpu.product"
    gpu_memory: str = "nvidia.com/gpu.memory"
    gpu_count: str = "nvidia.com/gpu.count"
    nvlink_island: str = "caldera.io/nvlink-island"
    hypernode: str = "caldera.io/hypernode"
    spine: str = "caldera.io/spine"


class NamespaceBindingModel(_Strict):
    queues: list[str] = Field(min_length=1)
    critical: bool = False
    service_accounts: list[str] = Field(default_factory=lambda: ["default"])


class LeaderElectionModel(_Strict):
    enabled: bool = True
    lease_duration: float = Field(default=15.0, gt=0, le=600)
    renew_deadline: float = Field(default=10.0, gt=0, le=600)
    retry_period: float = Field(default=2.0, gt=0, le=600)

    @model_validator(mode="after")
    def _nested(self) -> LeaderElectionModel:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("needs retry_period < renew_deadline < lease_duration")
        return self


class KubeSettingsModel(_Strict):
    namespaces: dict[str, NamespaceBindingModel] = Field(default_factory=dict)
    state_namespace: str = Field(default="caldera-system", min_length=1)
    scheduler_name: str = Field(default="volcano", min_length=1)
    image: str = ""
    gpu_resource: str = Field(default="nvidia.com/gpu", min_length=1)
    gpu_share: GpuShareModel = Field(default_factory=GpuShareModel)
    labels: NodeLabelsModel = Field(default_factory=NodeLabelsModel)
    node_selector: str = ""
    checkpoint_root: str = "/checkpoints"
    master_port: int = Field(default=29500, ge=1, le=65535)
    bind_timeout: float = Field(default=300.0, gt=0)
    ready_timeout: float = Field(default=600.0, gt=0)
    bind_wait: float | None = Field(default=None, ge=0, le=600)
    terminating_timeout: float = Field(default=120.0, gt=0)
    resync: float = Field(default=30.0, gt=0, le=3600)
    request_timeout: float = Field(default=30.0, gt=0, le=600)
    leader_election: LeaderElectionModel = Field(default_factory=LeaderElectionModel)
    pod_security: PodSecurity = PodSecurity.RESTRICTED

    @field_validator("namespaces")
    @classmethod
    def _served(cls, value: dict[str, NamespaceBindingModel]) -> dict[str, NamespaceBindingModel]:
        for namespace in value:
            if namespace in RESERVED_NAMESPACES:
                raise ValueError(f"{namespace} is the cluster's own: caldera never serves it")
            if not _DNS_LABEL.match(namespace):
                raise ValueError(f"{namespace!r} is not a namespace name")
        return value


def settings_from_model(model: KubeSettingsModel) -> KubeSettings:
    return KubeSettings(
        namespaces=MappingProxyType(
            {
                namespace: NamespaceBinding(
                    tuple(binding.queues), binding.critical, tuple(binding.service_accounts)
                )
                for namespace, binding in sorted(model.namespaces.items())
            }
        ),
        state_namespace=model.state_namespace,
        scheduler_name=model.scheduler_name,
        image=model.image,
        gpu_resource=model.gpu_resource,
        gpu_share=GpuShare(model.gpu_share.resource, model.gpu_share.unit),
        labels=NodeLabels(**model.labels.model_dump()),
        node_selector=model.node_selector,
        checkpoint_root=model.checkpoint_root,
        master_port=model.master_port,
        bind_timeout=model.bind_timeout,
        ready_timeout=model.ready_timeout,
        bind_wait=model.bind_wait,
        terminating_timeout=model.terminating_timeout,
        resync=model.resync,
        request_timeout=model.request_timeout,
        leader_election=LeaderElection(**model.leader_election.model_dump()),
        pod_security=PodSecurity(model.pod_security),
    )


def uses_pod_groups(settings: KubeSettings) -> bool:
    """Whether the pods' scheduler reads a start's PodGroup (gang, queue, topology)."""
    return settings.scheduler_name not in NO_POD_GROUPS
