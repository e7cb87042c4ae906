"""The platform layer in front of the cycle: accept, hold or reject a submission.

Pure like the cycle; every runtime calls it when a submission arrives.
- unknown queue, Closing or Closed queue, a `critical` job where the queue does not accept
  critical work, a request beyond the queue's capability or one no node group could ever
  host (a MIG profile no node offers, or fewer slices of it than the gang needs): rejected
  with a one-line reason;
- a queue in waiting mode for a large job: submissions below priority 800 are Held;
- a queue outside its time window: Held until the window opens;
- otherwise Pending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from caldera.core.snapshot import Throttle
from caldera.model import (
    ESCALATION_CEILING,
    GPU_MILLI,
    JobSpec,
    JobState,
    JobType,
    Node,
    Queue,
    QueueState,
    TopologyMode,
)

__all__ = ["Admission", "admit", "could_ever_fit", "fits_one_domain"]


@dataclass(frozen=True, slots=True)
class Admission:
    state: JobState  # PENDING, HELD or REJECTED
    reason: str = ""


_NodeKind = tuple[str, int, int, int, tuple[str, ...]]  # model, gpus, cpu, memory, slices
_KINDS: dict[int, tuple[tuple[Node, ...], dict[_NodeKind, int]]] = {}


def _node_kinds(nodes: tuple[Node, ...]) -> dict[_NodeKind, int]:
    """Distinct node kinds with their counts (a cluster has few; remembered per node tuple)."""
    cached = _KINDS.get(id(nodes))
    if cached is not None and cached[0] is nodes:
        return cached[1]
    kinds: dict[_NodeKind, int] = {}
    for node in nodes:
        kind = (node.gpu_model, node.gpus, node.cpu, node.memory, node.slices)
        kinds[kind] = kinds.get(kind, 0) + 1
    if len(_KINDS) > 64:
        _KINDS.clear()
    _KINDS[id(nodes)] = (nodes, kinds)
    return kinds


def _per_node(gpus: int, slices: tuple[str, ...], spec: JobSpec) -> int:
    """How many of the job's tasks an empty node with these devices could hold (GPUs only)."""
    if spec.gpu_profile is not None:
        return slices.count(spec.gpu_profile)
    if gpus * GPU_MILLI < spec.gpu:
        return 0
    return gpus // spec.whole_gpus if spec.whole_gpus else spec.min_available


def _tasks_on(node: Node, spec: JobSpec) -> int:
    """How many of the job's tasks an empty node could hold."""
    models = spec.gpu_models
    if models is not None and node.gpu_model not in models:
        return 0
    if node.cpu < spec.cpu or node.memory < spec.memory:
        return 0
    return _per_node(node.gpus, node.slices, spec)


def could_ever_fit(spec: JobSpec, nodes: tuple[Node, ...]) -> bool:
    """Is there any node that could host one task, and enough such GPUs for the gang?"""
    models = spec.gpu_models
    capacity = 0
    for (model, gpus, cpu, memory, slices), count in _node_kinds(nodes).items():
        if models is not None and model not in models:
            continue
        if cpu < spec.cpu or memory < spec.memory:
            continue
        per_node = _per_node(gpus, slices, spec)
        if per_node and spec.gpu < GPU_MILLI and spec.gpu_profile is None:
            return True
        capacity += count * per_node
    return capacity >= spec.min_available


def fits_one_domain(spec: JobSpec, nodes: tuple[Node, ...]) -> bool:
    """With a hard topology constraint: is one domain of that tier big enough for the gang?"""
    topology = spec.topology
    if topology is None or topology.mode is not TopologyMode.HARD or spec.min_available == 1:
        return True
    per_domain: dict[int, int] = {}
    for node in nodes:
        domain = node.tier1 if topology.highest_tier <= 1 else node.tier2
        per_domain[domain] = per_domain.get(domain, 0) + _tasks_on(node, spec)
    return max(per_domain.values(), default=0) >= spec.min_available


def admit(
    spec: JobSpec,
    queues: Mapping[str, Queue],
    throttles: Mapping[str, Throttle],
    now: float,
    nodes: tuple[Node, ...] = (),
    week_offset: float = 0.0,
) -> Admission:
    """`now + week_offset` is seconds since a Monday 00:00 UTC (see PolicyConfig)."""
    queue = queues.get(spec.queue)
    if queue is None:
        return Admission(JobState.REJECTED, f"unknown queue {spec.queue!r}")
    if queue.state is not QueueState.OPEN:
        return Admission(JobState.REJECTED, f"queue {queue.name!r} is {queue.state.value}")
    if any(q.parent == queue.name for q in queues.values()):
        return Admission(
            JobState.REJECTED, f"queue {queue.name!r} is a department: it holds no jobs"
        )
    parent = queues.get(queue.parent) if queue.parent is not None else None
    if parent is not None and not spec.gang_request.fits_in(parent.capability):
        return Admission(
            JobState.REJECTED, f"request exceeds the capability of queue {parent.name!r}"
        )
    if spec.type is JobType.CRITICAL and not queue.critical_allowed:
        return Admission(JobState.REJECTED, f"queue {queue.name!r} does not accept critical jobs")
    if not spec.gang_request.fits_in(queue.capability):
        return Admission(
            JobState.REJECTED, f"request exceeds the capability of queue {queue.name!r}"
        )
    if nodes and not could_ever_fit(spec, nodes):
        return Admission(JobState.REJECTED, "no node in the cluster can host this request")
    if nodes and not fits_one_domain(spec, nodes):
        tier = spec.topology.highest_tier if spec.topology else 1
        return Admission(
            JobState.REJECTED, f"no tier-{tier} domain can host this gang (hard topology)"
        )
    if spec.queue in throttles and spec.priority < ESCALATION_CEILING:
        return Admission(JobState.HELD, "throttle")
    if not queue.in_window(now + week_offset):
        return Admission(JobState.HELD, "window")
    return Admission(JobState.PENDING)
