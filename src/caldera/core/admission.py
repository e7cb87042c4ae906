"""The platform layer in front of the cycle: accept, hold or reject a submission.

Pure like the cycle; every runtime calls it when a submission arrives.
- unknown queue, Closing or Closed queue, a request beyond the queue's capability or one no
  node group could ever host: rejected with a one-line reason;
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
    Node,
    Queue,
    QueueState,
)

__all__ = ["Admission", "admit", "could_ever_fit"]


@dataclass(frozen=True, slots=True)
class Admission:
    state: JobState  # PENDING, HELD or REJECTED
    reason: str = ""


def could_ever_fit(spec: JobSpec, nodes: tuple[Node, ...]) -> bool:
    """Is there any node that could host one task, and enough such GPUs for the gang?"""
    models = spec.gpu_models
    suitable = [
        node
        for node in nodes
        if (models is None or node.gpu_model in models)
        and node.gpus * GPU_MILLI >= spec.gpu
        and node.cpu >= spec.cpu
        and node.memory >= spec.memory
    ]
    if not suitable:
        return False
    if spec.gpu < GPU_MILLI:
        return True
    per_node = [node.gpus // spec.whole_gpus for node in suitable]
    return sum(per_node) >= spec.min_available


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
    if not spec.gang_request.fits_in(queue.capability):
        return Admission(
            JobState.REJECTED, f"request exceeds the capability of queue {queue.name!r}"
        )
    if nodes and not could_ever_fit(spec, nodes):
        return Admission(JobState.REJECTED, "no node in the cluster can host this request")
    if spec.queue in throttles and spec.priority < ESCALATION_CEILING:
        return Admission(JobState.HELD, "throttle")
    if not queue.in_window(now + week_offset):
        return Admission(JobState.HELD, "window")
    return Admission(JobState.PENDING)
