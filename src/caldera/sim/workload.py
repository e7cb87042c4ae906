"""What a workload source (generator or trace) adds to a scenario."""

from __future__ import annotations

from dataclasses import dataclass, field

from caldera.config import Submission
from caldera.model import NodeGroup, Queue

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """Jobs, and — when the source describes its own cluster — nodes and queues."""

    submissions: tuple[Submission, ...]
    node_groups: tuple[NodeGroup, ...] = ()
    queues: tuple[Queue, ...] = field(default=())
