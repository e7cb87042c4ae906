"""A new node list: every placement re-keyed by node name.

A node's index is its position in the list ordered by name (`caldera.k8s.reading.nodes`), so a node
that comes or goes moves the others' indices. The runtime's jobs, their reservations and the
room held by orphan pods name nodes by index: `rekey` moves each to its node's new index. A
task whose node is gone has ended (so is its pod, whatever the API still shows); a
reservation naming a gone node is dropped (the cycle then plans again from what exists).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from caldera.core import TaskPlacement
from caldera.k8s.jobs import KubeJob
from caldera.model import Node

__all__ = ["rekey"]


def rekey(
    jobs: Iterable[KubeJob],
    orphans: Mapping[tuple[str, str], TaskPlacement],
    old: tuple[Node, ...],
    index: Mapping[str, int],
) -> tuple[list[KubeJob], dict[tuple[str, str], TaskPlacement]]:
    """Move every task, reservation and orphan placement from `old` to the nodes `index`
    names. Returns the jobs that lost a task with its node (once per task lost, to settle)
    and the orphans' placements whose node remains."""

    def moved(task: TaskPlacement) -> TaskPlacement | None:
        node = index.get(old[task.node].name) if old else None
        return replace(task, node=node) if node is not None else None

    broken: list[KubeJob] = []
    for job in jobs:
        for task in job.tasks:
            placement = moved(task.placement)
            if placement is None:
                # Its node is gone: so is the pod, whatever the API still shows.
                task.done, task.exit_code = True, None
                broken.append(job)
            else:
                task.placement = placement
        if job.nomination is not None:
            job.nomination = _renominate(job, moved)
        job.touch()
    kept = {
        key: placement for key, task in orphans.items() if (placement := moved(task)) is not None
    }
    return broken, kept


def _renominate(job: KubeJob, moved: Callable[[TaskPlacement], TaskPlacement | None]) -> Any:
    """The job's reservation with its placements re-keyed; None when a node it names is gone
    (the cycle then plans again from what exists)."""
    nomination = job.nomination
    assert nomination is not None
    placement = [moved(t) for t in nomination.placement]
    if any(t is None for t in placement):
        return None
    pending = []
    for victim in nomination.pending:
        tasks = [moved(t) for t in victim.tasks]
        if any(t is None for t in tasks):
            return None
        pending.append(replace(victim, tasks=tuple(t for t in tasks if t)))
    return replace(nomination, placement=tuple(t for t in placement if t), pending=tuple(pending))
