"""Helpers for the baseline-policy tests: one cycle under a named policy, and job states the
fluent builders do not cover (tasks being released, gangs cut below their minimum)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from builders import ClusterBuilder, JobBuilder, QueueBuilder, snapshot
from caldera.core import Decisions, JobView, PolicyConfig, Snapshot, run
from caldera.model import JobState, Node
from caldera.policies import get_policy
from caldera.sim import Scenario

__all__ = [
    "NOW",
    "cut_view",
    "decide",
    "evicted_tasks",
    "log_violations",
    "releasing_view",
    "victims",
]

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


def log_violations(result: dict[str, Any], scenario: Scenario) -> list[str]:
    """Replay a simulation's event log and say what breaks the rules every baseline keeps
    (independent of the policies' code): cluster GPUs over capacity, a queue over its GPU
    capability (room being released still counts), a victim at priority >= 1000, labelled
    protected or conformance-protected, a debug preemptor, an eviction by fifo, a job
    starting afresh while it still holds GPUs."""
    problems: list[str] = []
    specs = {s.spec.name: s.spec for s in scenario.submissions}
    capability = {
        q.name: q.capability.gpu for q in scenario.queues if q.capability and q.capability.gpu > 0
    }
    total = sum(n.gpus for n in scenario.nodes) * 1000
    running: dict[str, int] = {}  # job -> milli-GPUs of tasks running
    leaving: list[tuple[float, str, int]] = []  # (released_at, queue, milli)
    held: dict[str, int] = {}  # queue -> milli held (running + releasing)

    def release_until(t: float) -> None:
        for item in sorted(x for x in leaving if x[0] <= t):
            leaving.remove(item)
            held[item[1]] -= item[2]

    for event in result["events"]:
        release_until(event["t"])
        name = event["job"]
        spec = specs.get(name) if name else None
        if spec is None:
            continue
        kind = event["kind"]
        if kind == "start":
            gpu = round(event["gpus"] * 1000)
            if not event.get("grow") and running.get(name, 0):
                problems.append(f"t={event['t']}: {name} starts while still holding GPUs")
            running[name] = running.get(name, 0) + gpu
            held[spec.queue] = held.get(spec.queue, 0) + gpu
            if held[spec.queue] > capability.get(spec.queue, total):
                problems.append(f"t={event['t']}: queue {spec.queue} over its capability")
            if sum(held.values()) > total:
                problems.append(f"t={event['t']}: more GPUs held than the cluster has")
        elif kind == "evict":
            gpu = round(event["gpus"] * 1000)
            running[name] -= gpu
            leaving.append((event["released_at"], spec.queue, gpu))
            if event["reason"] in ("preempt", "reclaim"):
                if spec.priority >= 1000 or spec.protected or spec.conformance_protected:
                    problems.append(f"t={event['t']}: {name} may never be a victim")
                preemptor = specs.get(event["preemptor"] or "")
                if preemptor is not None and not preemptor.may_preempt:
                    problems.append(f"t={event['t']}: {preemptor.name} (Never) preempted")
                if result["policy"] == "fifo":
                    problems.append(f"t={event['t']}: fifo evicted {name}")
        elif kind == "finish":
            held[spec.queue] -= running.pop(name, 0)
    return problems
