"""Fluent builders for test objects, with defaults that make the common case one line.

    nodes = cluster().group("h100", count=16, gpus=8, island=8, per_tier1=8).build()
    prod = queue("prod").deserved(gpu=64).guarantee(gpu=32)
    big = job("train").large().gang(4, gpus=8).topology(tier=1, mode="hard").queue("prod")
    small = job("n1").gpus(8).running(since=0).on("h100-0")
    snap = snapshot(nodes, queues=[prod], jobs=[big, small], now=60)

Defaults: a job is a `normal` single-task, 1-GPU job in queue "default", submitted at 0;
a queue is Open, reclaimable, weight 1, with no quotas; a node has 8 GPUs in one NVLink
island, 128 cores and 1 TiB of memory. `snapshot` creates an open queue for every queue name a
job mentions that is not given explicitly. GPU quantities in builders are whole GPUs (floats
allowed for shares); the model's milli-GPUs are computed here.

Running jobs name the nodes their tasks sit on (`.on("h100-0")`, one call per task); the
snapshot resolves names to indexes and picks the lowest free devices there, unless `devices=`
is given. Nothing here decides anything: placement choices in tests stay explicit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from caldera.core import (
    Decisions,
    JobView,
    Nomination,
    PolicyConfig,
    Snapshot,
    TaskPlacement,
    Throttle,
)
from caldera.model import (
    GPU_MILLI,
    Checkpointing,
    JobSpec,
    JobState,
    JobType,
    Node,
    NodeGroup,
    Queue,
    QueueState,
    Resources,
    TimeWindow,
    TopologyMode,
    TopologySpec,
    expand_node_groups,
    slice_milli,
)
from caldera.sim import parse_scenario

__all__ = [
    "ClusterBuilder",
    "JobBuilder",
    "QueueBuilder",
    "cluster",
    "decided_evictions",
    "decided_starts",
    "evict_and_release_scenario",
    "job",
    "milli",
    "queue",
    "snapshot",
]

GiB = 1024  # MiB


def milli(gpus: float) -> int:
    """Whole or fractional GPUs as the model's milli-GPUs."""
    return round(gpus * GPU_MILLI)


# -- cluster -------------------------------------------------------------------------------


class ClusterBuilder:
    def __init__(self) -> None:
        self._groups: list[NodeGroup] = []

    def group(
        self,
        prefix: str,
        *,
        count: int = 1,
        gpus: int = 8,
        island: int = 0,
        per_tier1: int = 0,
        per_tier2: int = 0,
        model: str = "H100",
        cpu: float = 128,
        memory_gib: int = 1024,
        mig: Sequence[Sequence[str]] = (),
    ) -> ClusterBuilder:
        """`island` 0: one NVLink island per node; `per_tier1` 0: the group is one tier-1;
        `mig`: GPUs in MIG mode, each as its slices' profiles (the last `len(mig)` GPUs)."""
        self._groups.append(
            NodeGroup(
                prefix=prefix,
                count=count,
                gpus=gpus,
                gpu_model=model,
                cpu=round(cpu * 1000),
                memory=memory_gib * GiB,
                nvlink_island=island,
                nodes_per_tier1=per_tier1,
                tier1_per_tier2=per_tier2,
                mig=tuple(tuple(profiles) for profiles in mig),
            )
        )
        return self

    def build(self) -> tuple[Node, ...]:
        return expand_node_groups(self._groups)


def cluster() -> ClusterBuilder:
    return ClusterBuilder()


# -- queues --------------------------------------------------------------------------------


def _quota(gpu: float | None, cpu: float | None, memory_gib: float | None) -> Resources:
    return Resources(
        gpu=milli(gpu) if gpu is not None else 0,
        cpu=round(cpu * 1000) if cpu is not None else 0,
        memory=round(memory_gib * GiB) if memory_gib is not None else 0,
    )


class QueueBuilder:
    def __init__(self, name: str) -> None:
        self._queue = Queue(name=name)

    @property
    def name(self) -> str:
        return self._queue.name

    def _set(self, **changes: Any) -> QueueBuilder:
        self._queue = replace(self._queue, **changes)
        return self

    def weight(self, value: int) -> QueueBuilder:
        return self._set(weight=value)

    def deserved(
        self, gpu: float | None = None, cpu: float | None = None, memory_gib: float | None = None
    ) -> QueueBuilder:
        return self._set(deserved=_quota(gpu, cpu, memory_gib))

    def guarantee(
        self, gpu: float | None = None, cpu: float | None = None, memory_gib: float | None = None
    ) -> QueueBuilder:
        return self._set(guarantee=_quota(gpu, cpu, memory_gib))

    def capability(
        self, gpu: float | None = None, cpu: float | None = None, memory_gib: float | None = None
    ) -> QueueBuilder:
        return self._set(capability=_quota(gpu, cpu, memory_gib))

    def reclaimable(self, value: bool = True) -> QueueBuilder:
        return self._set(reclaimable=value)

    def critical_allowed(self, value: bool = True) -> QueueBuilder:
        return self._set(critical_allowed=value)

    def closed(self) -> QueueBuilder:
        return self._set(state=QueueState.CLOSED)

    def closing(self) -> QueueBuilder:
        return self._set(state=QueueState.CLOSING)

    def window(
        self, days: Iterable[int] = range(1, 8), start: float = 0, end: float = 24
    ) -> QueueBuilder:
        windows = (*self._queue.time_windows, TimeWindow(frozenset(days), start, end))
        return self._set(time_windows=windows)

    def build(self) -> Queue:
        return self._queue


def queue(name: str) -> QueueBuilder:
    return QueueBuilder(name)


# -- jobs ----------------------------------------------------------------------------------


@dataclass
class _TaskSpot:
    node: str | int
    devices: tuple[int, ...] | None


@dataclass
class _Runtime:
    state: JobState = JobState.PENDING
    running_since: float | None = None
    first_start: float | None = None
    work_base: float = 0.0
    saved_work: float = 0.0
    reported_progress: float | None = None
    last_evicted_at: float | None = None
    evictions: int = 0
    hold_reason: str | None = None
    throttled_once: bool = False
    nomination: Nomination | None = None
    spots: list[_TaskSpot] = field(default_factory=list)


class JobBuilder:
    def __init__(self, name: str) -> None:
        self._spec: dict[str, Any] = {
            "id": name,
            "name": name,
            "queue": "default",
            "type": JobType.NORMAL,
            "submit": 0.0,
            "tasks": 1,
            "gpu": GPU_MILLI,
        }
        self._rt = _Runtime()

    @property
    def name(self) -> str:
        return str(self._spec["name"])

    @property
    def queue_name(self) -> str:
        return str(self._spec["queue"])

    def _set(self, **changes: Any) -> JobBuilder:
        self._spec.update(changes)
        return self

    # what it is
    def type(self, job_type: JobType | str) -> JobBuilder:
        return self._set(type=JobType(job_type))

    def critical(self) -> JobBuilder:
        return self.type(JobType.CRITICAL)

    def large(self) -> JobBuilder:
        return self.type(JobType.LARGE)

    def normal(self) -> JobBuilder:
        return self.type(JobType.NORMAL)

    def debug(self) -> JobBuilder:
        return self.type(JobType.DEBUG)

    def queue(self, name: str) -> JobBuilder:
        return self._set(queue=name)

    def submitted(self, t: float) -> JobBuilder:
        return self._set(submit=float(t))

    # what it asks for
    def gang(self, tasks: int, gpus: float = 1, min_available: int | None = None) -> JobBuilder:
        return self._set(tasks=tasks, gpu=milli(gpus), min_available=min_available or 0)

    def tasks(self, count: int) -> JobBuilder:
        return self._set(tasks=count)

    def gpus(self, per_task: float) -> JobBuilder:
        return self._set(gpu=milli(per_task))

    def profile(self, name: str) -> JobBuilder:
        """One MIG slice of this profile per task (`gpu` becomes its GPU-equivalent)."""
        return self._set(gpu_profile=name)

    def min_available(self, count: int) -> JobBuilder:
        return self._set(min_available=count)

    def cpu(self, cores: float) -> JobBuilder:
        return self._set(cpu=round(cores * 1000))

    def memory(self, gib: float) -> JobBuilder:
        return self._set(memory=round(gib * GiB))

    def model(self, *names: str) -> JobBuilder:
        return self._set(gpu_models=frozenset(names))

    def topology(self, tier: int = 1, mode: str = "hard") -> JobBuilder:
        return self._set(topology=TopologySpec(TopologyMode(mode), tier))

    def checkpoint(
        self, interval: float | None = None, cost: float = 0.0, on_sigterm: bool = True
    ) -> JobBuilder:
        return self._set(checkpoint=Checkpointing(interval, cost, on_sigterm))

    def no_emergency_checkpoint(self, interval: float | None = None) -> JobBuilder:
        """Checkpoints only periodically (if at all): an eviction loses work since then."""
        return self.checkpoint(interval, 0.0, on_sigterm=False)

    def expected(self, seconds: float) -> JobBuilder:
        return self._set(expected_duration=float(seconds))

    def duration(self, seconds: float) -> JobBuilder:
        return self._set(duration=float(seconds))

    def label(self, key: str, value: str) -> JobBuilder:
        labels = dict(self._spec.get("labels", {}))
        labels[key] = value
        return self._set(labels=labels)

    def protected(self) -> JobBuilder:
        return self.label("protected", "true")

    def namespace(self, name: str) -> JobBuilder:
        return self._set(namespace=name)

    def priority_class(self, name: str) -> JobBuilder:
        return self._set(priority_class_name=name)

    # where it is in its life
    def running(self, since: float = 0.0, work: float = 0.0) -> JobBuilder:
        """Running and making progress since `since`, with `work` seconds done before that."""
        self._rt.state = JobState.RUNNING
        self._rt.running_since = float(since)
        self._rt.first_start = float(since)
        self._rt.work_base = float(work)
        return self

    def on(self, node: str | int, devices: Sequence[int] | None = None) -> JobBuilder:
        """One running task on `node` (name or index); devices default to the lowest free."""
        self._rt.spots.append(_TaskSpot(node, None if devices is None else tuple(devices)))
        return self

    def on_each(self, *nodes: str | int) -> JobBuilder:
        for node in nodes:
            self.on(node)
        return self

    def saved(self, work: float) -> JobBuilder:
        self._rt.saved_work = float(work)
        return self

    def progress(self, fraction: float) -> JobBuilder:
        self._rt.reported_progress = fraction
        return self

    def evicted_at(self, t: float, times: int = 1) -> JobBuilder:
        self._rt.last_evicted_at = float(t)
        self._rt.evictions = times
        return self

    def held(self, reason: str) -> JobBuilder:
        self._rt.state = JobState.HELD
        self._rt.hold_reason = reason
        return self

    def throttled_once(self) -> JobBuilder:
        self._rt.throttled_once = True
        return self

    def nominated(self, nomination: Nomination) -> JobBuilder:
        self._rt.nomination = nomination
        return self

    def build(self) -> JobSpec:
        return JobSpec(**self._spec)

    def view(self, nodes: Sequence[Node] = (), free: list[list[int]] | None = None) -> JobView:
        """The job as a snapshot sees it; `free` (milli per device) is updated as tasks land."""
        spec = self.build()
        rt = self._rt
        placement = tuple(_resolve(spot, spec, nodes, free) for spot in rt.spots)
        if rt.state is JobState.RUNNING and len(placement) < 1:
            raise ValueError(f"running job {spec.name!r} needs .on(node) for its tasks")
        return JobView(
            spec=spec,
            state=rt.state,
            placement=placement,
            first_start=rt.first_start,
            running_since=rt.running_since,
            work_base=rt.work_base,
            saved_work=rt.saved_work,
            reported_progress=rt.reported_progress,
            evictions=rt.evictions,
            last_evicted_at=rt.last_evicted_at,
            hold_reason=rt.hold_reason,
            nomination=rt.nomination,
            throttled_once=rt.throttled_once,
        )


def job(name: str) -> JobBuilder:
    return JobBuilder(name)


def _node_index(nodes: Sequence[Node], node: str | int) -> int:
    if isinstance(node, int):
        return node
    for candidate in nodes:
        if candidate.name == node:
            return candidate.index
    raise KeyError(f"no node named {node!r}")


def _resolve(
    spot: _TaskSpot, spec: JobSpec, nodes: Sequence[Node], free: list[list[int]] | None
) -> TaskPlacement:
    index = _node_index(nodes, spot.node)
    node = nodes[index]
    gpu = spec.gpu
    per_device = GPU_MILLI if gpu >= GPU_MILLI else gpu
    count = gpu // GPU_MILLI if gpu >= GPU_MILLI else (1 if gpu else 0)
    candidates: Sequence[int] = range(node.gpus)
    if spec.gpu_profile is not None:  # one whole MIG slice of the profile
        per_device, count = gpu, 1
        candidates = [
            d for d in range(node.gpus, node.devices) if node.profile_of(d) == spec.gpu_profile
        ]
    devices = spot.devices
    if devices is None:
        left = free[index] if free is not None else _capacities(node)
        devices = tuple(d for d in candidates if left[d] >= per_device)[:count]
        if len(devices) < count:
            raise ValueError(f"{spec.name}: no room for a task on node {spot.node!r}")
    if free is not None:
        for d in devices:
            free[index][d] -= per_device
    return TaskPlacement(index, tuple(devices), per_device if count else 0, spec.cpu, spec.memory)


def _capacities(node: Node) -> list[int]:
    """Free milli per device of an empty node: whole GPUs, then MIG slices."""
    return [GPU_MILLI] * node.gpus + [slice_milli(p) for p in node.slices]


# -- snapshots -----------------------------------------------------------------------------


def snapshot(
    nodes: Sequence[Node] | ClusterBuilder,
    *,
    queues: Iterable[Queue | QueueBuilder] = (),
    jobs: Iterable[JobBuilder | JobView] = (),
    now: float = 0.0,
    config: PolicyConfig | None = None,
    throttles: Iterable[Throttle] = (),
) -> Snapshot:
    built_nodes = nodes.build() if isinstance(nodes, ClusterBuilder) else tuple(nodes)
    free = [_capacities(n) for n in built_nodes]
    views: list[JobView] = []
    for item in jobs:
        views.append(item.view(built_nodes, free) if isinstance(item, JobBuilder) else item)
    by_name: dict[str, Queue] = {}
    for q in queues:
        built = q.build() if isinstance(q, QueueBuilder) else q
        by_name[built.name] = built
    for view in views:
        by_name.setdefault(view.spec.queue, Queue(name=view.spec.queue))
    return Snapshot(
        now=float(now),
        nodes=built_nodes,
        queues=by_name,
        jobs=tuple(views),
        config=config or PolicyConfig(),
        throttles={t.queue: t for t in throttles},
    )


# -- reading decisions ---------------------------------------------------------------------


def decided_starts(
    snap: Snapshot, decisions: Decisions
) -> dict[str, tuple[tuple[str, tuple[int, ...], int], ...]]:
    """{job: ((node name, devices, milli per device), …)} for every start, in order."""
    names = [n.name for n in snap.nodes]
    result: dict[str, tuple[tuple[str, tuple[int, ...], int], ...]] = {}
    for start in decisions.starts:
        spots = tuple((names[t.node], t.devices, t.milli) for t in start.placement)
        result[start.job] = result.get(start.job, ()) + spots
    return result


def decided_evictions(decisions: Decisions) -> dict[str, tuple[str, str | None, tuple[int, ...]]]:
    """{victim: (reason, preemptor, tasks)} (tasks () = all)."""
    return {e.job: (e.reason.value, e.preemptor, e.tasks) for e in decisions.evictions}


def evict_and_release_scenario(later_submit: float = 90) -> Any:
    """One 8-GPU node: a normal job fills it, a critical job arrives at 60 s and takes one
    GPU back (an eviction, then its release after the grace period), a second normal job
    (arriving at `later_submit`) waits for the node: every kind of simulator event."""
    data = {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 8}]},
        "queues": [{"name": "team", "weight": 1}],
        "jobs": [
            {"name": "fill", "queue": "team", "type": "normal", "submit": 0, "duration": 600,
             "gpus_per_task": 8},
            {"name": "serve", "queue": "team", "type": "critical", "submit": 60,
             "duration": 300, "gpus_per_task": 1},
            {"name": "later", "queue": "team", "type": "normal", "submit": later_submit,
             "duration": 60, "gpus_per_task": 8},
        ],
    }  # fmt: skip
    return parse_scenario(data, Path.cwd(), "evict-and-release")
