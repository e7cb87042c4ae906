"""Helpers for the baseline-policy tests: one cycle under a named policy, and job states the
fluent builders do not cover (tasks being released, gangs cut below their minimum)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from builders import ClusterBuilder, JobBuilder, QueueBuilder, snapshot
from caldera.core import Decisions, JobView, PolicyConfig, Snapshot, get_policy, run
from caldera.model import JobState, Node

__all__ = ["NOW", "cut_view", "decide", "evicted_tasks", "releasing_view", "victims"]

NOW = 10 * 3600.0


def decide(
    policy: str,
    nodes: ClusterBuilder,
    jobs: Iterable[JobBuilder | JobView],
    queues: Iterable[QueueBuilder] = (),
    now: float = NOW,
) -> tuple[Snapshot, Decisions]:
    """One cycle of `policy` with its own default settings; checks the snapshot's room is
    exactly as before (a cycle decides, it does not change the world)."""
    chosen = get_policy(policy)
    config = chosen.defaults(PolicyConfig(name=policy))
    snap = snapshot(nodes, queues=queues, jobs=jobs, now=now, config=config)
    before = snap.free_room.fingerprint()
    decisions = run(snap, chosen)
    assert snap.free_room.fingerprint() == before, "the cycle changed the snapshot's room"
    return snap, decisions


def victims(decisions: Decisions) -> dict[str, tuple[str, str | None, int]]:
    """{victim: (reason, preemptor, tasks evicted)} summed over the cycle's evictions."""
    found: dict[str, tuple[str, str | None, int]] = {}
    for evict in decisions.evictions:
        reason, preemptor, count = found.get(evict.job, (evict.reason.value, evict.preemptor, 0))
        found[evict.job] = (reason, preemptor, count + len(evict.tasks))
    return found


def evicted_tasks(decisions: Decisions, job: str) -> list[tuple[int, ...]]:
    return [e.tasks for e in decisions.evictions if e.job == job]


def _view(builder: JobBuilder, nodes: Sequence[Node]) -> JobView:
    return builder.view(nodes)


def releasing_view(
    builder: JobBuilder, nodes: ClusterBuilder | Sequence[Node], **extra: Any
) -> JobView:
    """The job evicted whole and inside its grace period: every task it ran is releasing.
    Give its tasks explicit devices (`.on(node, devices=…)`): it is built on its own."""
    built = nodes.build() if isinstance(nodes, ClusterBuilder) else tuple(nodes)
    view = _view(builder, built)
    return replace(
        view,
        state=JobState.RELEASING,
        placement=(),
        releasing=view.placement,
        running_since=None,
        release_at=NOW + 30,
        **extra,
    )


def cut_view(builder: JobBuilder, nodes: ClusterBuilder | Sequence[Node], running: int) -> JobView:
    """A gang cut below its minimum: the first `running` tasks still run (and hang), the
    others are gone. Give its tasks explicit devices."""
    built = nodes.build() if isinstance(nodes, ClusterBuilder) else tuple(nodes)
    view = _view(builder, built)
    return replace(view, placement=view.placement[:running], running_since=None)
