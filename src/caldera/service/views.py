"""Read views: what the REST API (and any other reader) may see of the live runtime.

The API never takes the runtime's lock nor walks its jobs: it asks for these frozen values,
which the runtime builds (`Runtime.cluster_view`, `Runtime.queue_views`), and reads history
from the store. `ServiceRuntime` is the whole surface the API uses, so the routes can be
read — and tested — without the loop behind them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from caldera.config import Principal
from caldera.core import Waiting
from caldera.model import GPU_MILLI, Node, Queue, QueueState
from caldera.service.store import Store

__all__ = ["ClusterView", "DeviceView", "NodeView", "QueueView", "ServiceRuntime"]


@dataclass(frozen=True, slots=True)
class DeviceView:
    index: int
    free: int  # milli-GPUs
    jobs: tuple[str, ...]  # who holds a share of it
    uuid: str | None = None  # what CUDA_VISIBLE_DEVICES names (None: a virtual GPU)
    drained: str | None = None  # why it takes no new work (docs/gpus.md); None: healthy
    releasing: bool = False  # a holder's task on it was signalled to leave
    profile: str | None = None  # a MIG slice's profile; None: a whole GPU
    capacity: int = GPU_MILLI  # milli-GPUs: a whole GPU, or a slice's GPU-equivalent


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    gpu_model: str
    devices: tuple[DeviceView, ...]


@dataclass(frozen=True, slots=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    throttles: Mapping[str, str]  # queue -> the large job it waits for
    jobs_by_state: Mapping[str, int]  # live jobs
    held: int = 0  # milli-GPUs kept away from work by health drains (not free, not allocated)
    queue_of: Mapping[str, str] = field(default_factory=dict)  # each holder's queue

    @property
    def gpus(self) -> int:
        """Whole GPUs (MIG slices are counted apart)."""
        return sum(1 for node in self.nodes for d in node.devices if d.profile is None)

    @property
    def slices(self) -> int:
        return sum(1 for node in self.nodes for d in node.devices if d.profile is not None)

    @property
    def capacity_milli(self) -> int:
        """Whole GPUs and MIG slices, by GPU-equivalent (caldera.model.mig)."""
        return sum(d.capacity for node in self.nodes for d in node.devices)

    @property
    def free_milli(self) -> int:
        return sum(d.free for node in self.nodes for d in node.devices)

    @property
    def allocated_gpus(self) -> float:
        """GPUs held by jobs: neither free nor drained (slices by GPU-equivalent)."""
        return (self.capacity_milli - self.free_milli - self.held) / GPU_MILLI


@dataclass(frozen=True, slots=True)
class QueueView:
    queue: Queue
    allocated: int  # milli-GPUs held by its running and releasing tasks
    pending: int
    held: int
    running: int  # running or releasing
    throttled_for: str | None
    throttled_since: float | None = None  # when its waiting mode began


class ServiceRuntime(Protocol):
    """What the API needs from the runtime: reads, and the three commands."""

    nodes: tuple[Node, ...]
    data_dir: Path

    @property
    def store(self) -> Store: ...

    @property
    def tokens(self) -> Mapping[str, Principal]: ...

    def has_queue(self, name: str) -> bool: ...

    def is_live(self, job_id: str) -> bool: ...

    def cluster_view(self) -> ClusterView: ...

    def queue_views(self) -> list[QueueView]: ...

    def waiting_for(self, job_ids: Iterable[str]) -> dict[str, Waiting]: ...

    def submit(self, request: dict[str, Any], user: str) -> dict[str, Any]: ...

    def cancel(self, job_id: str) -> dict[str, Any]: ...

    def set_queue_state(self, name: str, state: QueueState) -> Queue: ...
