"""Settings of the Kubernetes runtime: the `kubernetes:` section of a caldera config file.

    kubernetes:
      namespace: ""                  # where job records are read ("" = every namespace)
      state_namespace: caldera-system
      image: registry.example.com/train:v1    # for records that name none
      gpu_resource: nvidia.com/gpu
      gpu_share: {resource: volcano.sh/gpu-memory, unit: mib}
      labels: {gpu_model: nvidia.com/gpu.product, hypernode: caldera.io/hypernode, ...}
      critical_namespaces: [inference]

Everything has a default that matches a stock NVIDIA GPU Operator + Volcano cluster, so the
section is optional. The rest of the file is the service's configuration (DESIGN §8): queues
and policy mean the same thing to every runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "GpuShare",
    "KubeSettings",
    "KubeSettingsModel",
    "NodeLabels",
    "settings_from_model",
]


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
class KubeSettings:
    namespace: str = ""
    state_namespace: str = "caldera-system"
    scheduler_name: str = "volcano"
    image: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    gpu_share: GpuShare = field(default_factory=GpuShare)
    labels: NodeLabels = field(default_factory=NodeLabels)
    node_selector: str = ""  # label selector: the nodes caldera schedules on ("" = all)
    checkpoint_root: str = "/checkpoints"  # CALDERA_CHECKPOINT_DIR = root/namespace/name
    master_port: int = 29500
    # Namespaces whose records may be of type critical ("*": any). Who may submit critical
    # is an authorisation decision (seed 003, "mistake one"): nobody, unless listed.
    critical_namespaces: tuple[str, ...] = ()
    # Seconds a started job's pods may stay unbound before the start is given up and the job
    # requeued (Volcano disagreed with caldera's view of the node: cordon, taint, a race).
    bind_timeout: float = 300.0
    resync: float = 30.0  # seconds between two full reconciles when nothing happens
    request_timeout: float = 30.0  # seconds per API request

    def critical_allowed(self, namespace: str) -> bool:
        return "*" in self.critical_namespaces or namespace in self.critical_namespaces


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


class KubeSettingsModel(_Strict):
    namespace: str = ""
    state_namespace: str = Field(default="caldera-system", min_length=1)
    scheduler_name: str = Field(default="volcano", min_length=1)
    image: str = ""
    gpu_resource: str = Field(default="nvidia.com/gpu", min_length=1)
    gpu_share: GpuShareModel = Field(default_factory=GpuShareModel)
    labels: NodeLabelsModel = Field(default_factory=NodeLabelsModel)
    node_selector: str = ""
    checkpoint_root: str = "/checkpoints"
    master_port: int = Field(default=29500, ge=1, le=65535)
    critical_namespaces: list[str] = Field(default_factory=list)
    bind_timeout: float = Field(default=300.0, gt=0)
    resync: float = Field(default=30.0, gt=0, le=3600)
    request_timeout: float = Field(default=30.0, gt=0, le=600)


def settings_from_model(model: KubeSettingsModel) -> KubeSettings:
    return KubeSettings(
        namespace=model.namespace,
        state_namespace=model.state_namespace,
        scheduler_name=model.scheduler_name,
        image=model.image,
        gpu_resource=model.gpu_resource,
        gpu_share=GpuShare(model.gpu_share.resource, model.gpu_share.unit),
        labels=NodeLabels(**model.labels.model_dump()),
        node_selector=model.node_selector,
        checkpoint_root=model.checkpoint_root,
        master_port=model.master_port,
        critical_namespaces=tuple(model.critical_namespaces),
        bind_timeout=model.bind_timeout,
        resync=model.resync,
        request_timeout=model.request_timeout,
    )
