"""Read views: what the REST API (and any other reader) may see of the live runtime.

The API never takes the runtime's lock nor walks its jobs: it asks for these frozen values,
which the runtime builds (`Runtime.cluster_view`, `Runtime.queue_views`), and reads history
from the store. `ServiceRuntime` is the whole surface the API uses, so the routes can be
read — and tested — without the loop behind them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from caldera.config import Principal
from caldera.core import Waiting
from caldera.model import GPU_MILLI, JobState, Node, Queue, QueueState
from caldera.runtime.requests import RequestRecord
from caldera.service.intake import Submission
from caldera.service.store import Store

if TYPE_CHECKING:
    from caldera.service.runtime import Runtime

__all__ = [
    "ClusterView",
    "DeviceView",
    "NodeView",
    "QueueView",
    "ServiceRuntime",
    "cluster_view",
    "queue_views",
    "waiting_for",
]


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
    user_of: Mapping[str, str] = field(default_factory=dict)  # each live job's user
    name_of: Mapping[str, str] = field(default_factory=dict)  # each live job's name

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

    def submit(
        self,
        request: RequestRecord | dict[str, Any],
        user: str,
        audit: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]: ...

    def enqueue(self, submission: Submission) -> Future[dict[str, Any]]: ...

    def cancel(self, job_id: str) -> dict[str, Any]: ...

    def set_queue_state(self, name: str, state: QueueState) -> Queue: ...


def cluster_view(runtime: Runtime) -> ClusterView:
    """Each device's free share and who holds it, waiting modes, live jobs by state."""
    holders: dict[tuple[int, int], list[str]] = {}
    leaving: set[tuple[int, int]] = set()
    queue_of: dict[str, str] = {}
    user_of: dict[str, str] = {}
    name_of: dict[str, str] = {}
    counts: dict[str, int] = {}
    with runtime.lock:
        free = [tuple(f) for f in runtime.room.free]
        throttles = {q: t.job for q, t in runtime.throttles.items()}
        for job in runtime.jobs.values():
            counts[job.state.value] = counts.get(job.state.value, 0) + 1
            user_of[job.id], name_of[job.id] = job.spec.user, job.spec.name
            if job.tasks:
                queue_of[job.id] = job.spec.queue
            for task in job.tasks:
                for device in task.placement.devices:
                    holders.setdefault((task.placement.node, device), []).append(job.id)
                    if task.leaving:
                        leaving.add((task.placement.node, device))
        watch = runtime.gpu_watch
        sick = watch.reasons() if watch is not None else {}
        held = watch.held_milli if watch is not None else 0
    host = runtime.host
    nodes = tuple(
        NodeView(
            node.name,
            node.gpu_model,
            tuple(
                DeviceView(
                    d,
                    free[node.index][d],
                    tuple(holders.get((node.index, d), ())),
                    uuid=host.uuid(d) if host is not None else None,
                    drained=sick.get(d),
                    releasing=(node.index, d) in leaving,
                    profile=node.profile_of(d),
                    capacity=runtime.room.milli_of.get(node.profile_of(d) or "", GPU_MILLI),
                )
                for d in range(node.devices)
            ),
        )
        for node in runtime.nodes
    )
    return ClusterView(nodes, throttles, counts, held, queue_of, user_of, name_of)


def queue_views(runtime: Runtime) -> list[QueueView]:
    """Every queue with what it holds and what waits in it, in configuration order; a
    department (a queue some queue names as its parent) holds what its teams hold."""
    with runtime.lock:
        views = []
        for name, queue in runtime.queues.items():
            teams = {name} | {q.name for q in runtime.queues.values() if q.parent == name}
            jobs = [j for j in runtime.jobs.values() if j.spec.queue in teams]
            waiting = runtime.throttles.get(name)
            views.append(
                QueueView(
                    queue=queue,
                    allocated=sum(t.placement.gpu for j in jobs for t in j.tasks),
                    pending=sum(j.state is JobState.PENDING for j in jobs),
                    held=sum(j.state is JobState.HELD for j in jobs),
                    running=sum(j.state in (JobState.RUNNING, JobState.RELEASING) for j in jobs),
                    throttled_for=waiting.job if waiting else None,
                    throttled_since=waiting.since if waiting else None,
                )
            )
        return views


def waiting_for(runtime: Runtime, job_ids: Iterable[str]) -> dict[str, Waiting]:
    """Why those of `job_ids` that are pending did not start, as the last cycle said."""
    found: dict[str, Waiting] = {}
    with runtime.lock:
        for job_id in job_ids:
            job = runtime.jobs.get(job_id)
            if job is not None and job.state is JobState.PENDING:
                reason = runtime.waiting.reason(job.spec)
                if reason is not None:
                    found[job_id] = reason
    return found
