"""One wire format for job records: what a runtime persists about a tracked job so that a
restarted runtime (a new server, a failed-over controller) carries on.

A record is a JSON-able mapping: the status fields of `TrackedJob` (`STATUS_FIELDS`, copied
as they are), the tasks, and the nomination. Placements name their node by a key the runtime
chooses (`NodeKeys`): the service keys its one host's node by index, the Kubernetes
controller by node name, so a change of node order loses nothing. A placement whose node is
unknown when read back is None: its task is gone with its node.

    {"node": KEY, "devices": [0, 1], "milli": 1000, "cpu": 4000, "memory": 16384}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from caldera.core import Nomination, PendingVictim, TaskPlacement
from caldera.model import Node
from caldera.runtime.job import TrackedJob

__all__ = [
    "STATUS_FIELDS",
    "ByIndex",
    "ByName",
    "NodeKeys",
    "nomination_from_wire",
    "nomination_to_wire",
    "placement_from_wire",
    "placement_to_wire",
    "status_from_wire",
    "status_to_wire",
]

# `TrackedJob` fields a record carries as they are (numbers, strings, booleans, None).
STATUS_FIELDS = (
    "first_start",
    "start_time",
    "end_time",
    "running_since",
    "work_base",
    "saved_work",
    "checkpoint_seen",
    "reported_progress",
    "evictions",
    "last_evicted_at",
    "evicted_for",
    "evict_reason",
    "signalled_at",
    "work_at_signal",
    "signal_gpu",
    "hold_reason",
    "hold_since",
    "throttled_once",
    "preempt_failed_at",
    "cancel_requested",
    "attempts",
    "retries",
    "exit_code",
    "reason",
    "lost_gpu_seconds",
)
_FLAGS = ("throttled_once", "cancel_requested")


class NodeKeys(Protocol):
    """How a runtime names a node in its records."""

    def key(self, node: int) -> Any: ...

    def index(self, key: Any) -> int | None: ...


class ByIndex:
    """Nodes named by their index (the service: one host, whose name may change)."""

    def key(self, node: int) -> Any:
        return node

    def index(self, key: Any) -> int | None:
        return int(key)


class ByName:
    """Nodes named by their name (Kubernetes: the node list changes order and members)."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.nodes = tuple(nodes)
        self._index = {node.name: node.index for node in self.nodes}

    def key(self, node: int) -> Any:
        return self.nodes[node].name

    def index(self, key: Any) -> int | None:
        return self._index.get(str(key))


def placement_to_wire(task: TaskPlacement, keys: NodeKeys) -> dict[str, Any]:
    return {
        "node": keys.key(task.node),
        "devices": list(task.devices),
        "milli": task.milli,
        "cpu": task.cpu,
        "memory": task.memory,
    }


def placement_from_wire(data: Mapping[str, Any], keys: NodeKeys) -> TaskPlacement | None:
    """None when the node is not (or no longer) one this runtime schedules on."""
    node = keys.index(data["node"])
    if node is None:
        return None
    return TaskPlacement(
        node,
        tuple(int(d) for d in data["devices"]),
        int(data["milli"]),
        int(data.get("cpu", 0)),
        int(data.get("memory", 0)),
    )


def nomination_to_wire(nomination: Nomination | None, keys: NodeKeys) -> dict[str, Any] | None:
    if nomination is None:
        return None
    return {
        "placement": [placement_to_wire(t, keys) for t in nomination.placement],
        "victims": list(nomination.victims),
        "pending": [
            {
                "job": v.job,
                "tasks": [placement_to_wire(t, keys) for t in v.tasks],
                # only a timed eviction carries its time: an untimed record reads as before
                **({"at": v.at} if v.at is not None else {}),
            }
            for v in nomination.pending
        ],
        "since": nomination.since,
        "reason": nomination.reason,
    }


def nomination_from_wire(data: Mapping[str, Any] | None, keys: NodeKeys) -> Nomination | None:
    """None without one, or when a node it names is gone (the cycle then plans again)."""
    if not data:
        return None
    placement = [placement_from_wire(t, keys) for t in data["placement"]]
    pending: list[PendingVictim] = []
    for victim in data.get("pending", []):
        tasks = [placement_from_wire(t, keys) for t in victim["tasks"]]
        if any(t is None for t in tasks):
            return None
        at = victim.get("at")  # a timed eviction (core/timing.py); absent in older records
        pending.append(
            PendingVictim(
                str(victim["job"]),
                tuple(t for t in tasks if t),
                None if at is None else float(at),
            )
        )
    if any(t is None for t in placement):
        return None
    return Nomination(
        tuple(t for t in placement if t),
        tuple(str(v) for v in data["victims"]),
        tuple(pending),
        float(data["since"]),
        str(data.get("reason", "preempt")),
    )


def status_to_wire(job: TrackedJob[Any]) -> dict[str, Any]:
    """The status fields of a job, by name."""
    return {name: getattr(job, name) for name in STATUS_FIELDS}


def status_from_wire(job: TrackedJob[Any], data: Mapping[str, Any]) -> None:
    """Restore the status fields a record carries (a field it lacks keeps its default: a
    record written before the field existed)."""
    for name in STATUS_FIELDS:
        if name in data:
            setattr(job, name, data[name])
    for name in _FLAGS:
        setattr(job, name, bool(getattr(job, name)))
    job.touch()
