"""Why a pending TrainingJob waits, in Kubernetes terms: `status.reason`, a `Waiting`
condition and an Event, from the reason the core's cycle itself had (`Decisions.waiting`,
`caldera.core.waiting`) — issue 34, item 5: a job waiting for room showed `Pending` with an
empty reason and no Event.

The cycle explains each pending *group* (its jobs fit, fail and search alike) by its first
job that did not start, and each preemptor holding reserved room by itself; every pending
job of an explained group is given its group's reason. A cluster with no node caldera may
use (`kubernetes.node_selector` matching none) says so instead of "no room".

The condition and `status.reason` carry the whole line (the numbers behind it); the status
is rewritten, and an Event sent, only when the *kind* of reason changes: a wait whose
numbers move every cycle writes nothing new (ten thousand pending jobs would otherwise
cost ten thousand writes a cycle). The condition turns False when the job starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from caldera.core import Decisions, Snapshot, Waiting, WaitReason
from caldera.k8s.jobs import KubeJob
from caldera.k8s.reporting.events import Reason
from caldera.model import JobState

if TYPE_CHECKING:
    from caldera.k8s.runtime import KubeRuntime

__all__ = ["WaitKind", "explain_waits", "tell_waits", "wait_kind"]


class WaitKind(StrEnum):
    """The `Waiting` condition's reason (CamelCase, as Kubernetes condition reasons are)."""

    QUEUE_CLOSED = "QueueClosed"
    QUEUE_CAP = "QueueCap"
    VICTIMS = "WaitingForVictims"
    NO_VICTIMS = "NoRoomNoVictims"
    TOPOLOGY = "Topology"
    FRAGMENTED = "Fragmented"
    NO_ROOM = "NoRoom"
    NO_NODES = "NoNodes"


_KINDS: Mapping[WaitReason, tuple[WaitKind, str]] = {
    WaitReason.CLOSED: (WaitKind.QUEUE_CLOSED, "its queue is closed"),
    WaitReason.CAPABILITY: (WaitKind.QUEUE_CAP, "its queue is at its cap"),
    WaitReason.VICTIMS: (WaitKind.VICTIMS, "room is reserved; waiting for preempted jobs"),
    WaitReason.NO_VICTIMS: (WaitKind.NO_VICTIMS, "no room, and no running job may give way"),
    WaitReason.TOPOLOGY: (WaitKind.TOPOLOGY, "no topology domain its hard topology allows fits"),
    WaitReason.FRAGMENTED: (WaitKind.FRAGMENTED, "GPUs are free, but no node fits a task"),
    WaitReason.NO_ROOM: (WaitKind.NO_ROOM, "not enough free GPUs"),
}


def wait_kind(waiting: Waiting) -> tuple[WaitKind, str]:
    """The condition reason and one line for people."""
    kind, text = _KINDS.get(waiting.reason, (WaitKind.NO_ROOM, str(waiting.reason)))
    return kind, f"waiting: {text}" + (f" ({waiting.detail})" if waiting.detail else "")


def explain_waits(
    jobs: Mapping[str, KubeJob],
    pending: Mapping[Any, Iterable[Any]],
    waiting: Iterable[Waiting],
    has_nodes: bool,
    node_selector: str,
) -> list[tuple[KubeJob, WaitKind, str]]:
    """(job, kind, line) for each pending job whose kind of wait changed; each job's
    `waiting` set to its line. `pending`: the cycle's pending groups, key → job views."""
    said: dict[str, tuple[WaitKind, str]] = {}
    if not has_nodes:
        where = f" (kubernetes.node_selector: {node_selector})" if node_selector else ""
        line = f"waiting: no node caldera may use{where}"
        for each in jobs.values():
            if each.state is JobState.PENDING:
                said[each.id] = (WaitKind.NO_NODES, line)
    else:
        for entry in waiting:
            kind_line = wait_kind(entry)
            if entry.job is not None:
                said[entry.job] = kind_line
                continue
            for view in pending.get(entry.group, ()):
                job_id = str(getattr(view, "id", ""))
                said.setdefault(job_id, kind_line)
    changed: list[tuple[KubeJob, WaitKind, str]] = []
    for job_id, (kind, line) in said.items():
        found = jobs.get(job_id)
        if found is None or found.state is not JobState.PENDING:
            continue
        before = found.waiting_kind
        found.waiting = line
        if before != kind.value:
            found.waiting_kind = kind.value
            changed.append((found, kind, line))
    return changed


def tell_waits(runtime: KubeRuntime, decisions: Decisions, snapshot: Snapshot) -> None:
    """After a cycle is applied: each pending job whose kind of wait changed gets its
    `Waiting` condition, `status.reason` and an Event (the actuator writes them)."""
    changed = explain_waits(
        runtime.jobs,
        snapshot.job_index.pending,
        decisions.waiting,
        bool(runtime.nodes),
        runtime.settings.node_selector,
    )
    for job, kind, line in changed:
        runtime.actuator.record(Reason.WAITING, job, snapshot.now, message=line, wait=kind.value)
