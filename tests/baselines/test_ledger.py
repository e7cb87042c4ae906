"""The running ledger (baselines/ledger.py) is what a walk over the running jobs finds, at
every cycle, and the baselines decide exactly the same with it as with a fresh walk.

Both over hypothesis' random scenarios (test_baseline_properties.scenarios): gangs cut
below their minimum, elastic extras, pods terminating, protected and kube-system jobs,
queues that run dry — every cycle of every baseline checked.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from test_baseline_properties import scenarios

import builders
from caldera.baselines import ledger as ledger_module
from caldera.baselines.common import missing_tasks
from caldera.baselines.ledger import RunningLedger, ledger_for
from caldera.baselines.volcano.victims import preempt_rule, reclaim_rule
from caldera.core.context import CycleContext
from caldera.core.jobindex import JobIndex
from caldera.core.room import Room
from caldera.core.victims import is_protected
from caldera.model import JobState
from caldera.policies import get_policy
from caldera.sim import Simulator, parse_scenario

POLICIES = ("volcano", "volcano-seed001", "priority-kill", "fifo")


def _walked(cycle: CycleContext) -> dict[str, Any]:
    """What a full walk over the snapshot's running jobs gives (the code before the ledger)."""
    snapshot = cycle.snapshot
    held: dict[str, list[int]] = {}
    on_node: dict[int, set[tuple[str, int]]] = {}
    victim_gpu: dict[int, dict[int, int]] = {}
    room = Room(snapshot.nodes)
    for job in snapshot.in_state(JobState.RUNNING):
        spec = job.spec
        sums = held.setdefault(spec.queue, [0, 0, 0, 0, 0, 0, 0])
        running = len(job.placement)
        wanted = running + missing_tasks(job)
        for i, value in enumerate((spec.gpu, spec.cpu, spec.memory)):
            sums[i] += value * running
            sums[3 + i] += value * wanted
        sums[6] += 1
        for index, task in enumerate(job.placement):
            room.take(task)
            on_node.setdefault(task.node, set()).add((job.id, index))
            if not is_protected(job):
                by_priority = victim_gpu.setdefault(task.node, {})
                by_priority[spec.priority] = by_priority.get(spec.priority, 0) + spec.gpu
    running_jobs = snapshot.in_state(JobState.RUNNING)
    return {
        "held": held,
        "missing": {
            job.id
            for job in running_jobs
            if len(job.placement) + len(job.releasing) < job.spec.tasks
        },
        "releasing": {
            t
            for job in snapshot.all_jobs
            if job.state is not JobState.PENDING
            for t in job.releasing
        },
        "on_node": on_node,
        "victim_gpu": {node: {p: g for p, g in by.items() if g} for node, by in victim_gpu.items()},
        "room": room.fingerprint(),
    }


def _check_ledger(cycle: CycleContext) -> None:
    ledger = ledger_for(cycle)
    want = _walked(cycle)
    assert ledger.held == want["held"]
    assert set(ledger.missing) == want["missing"]
    assert set(ledger.leaving(cycle.snapshot, set())) == want["releasing"]
    on_node = {
        node: {(job.id, index) for job, index in ledger.pods_on(node)}
        for node in ledger.on_node
        if ledger.on_node[node]
    }
    assert on_node == want["on_node"]
    assert {n: by for n, by in ledger.victim_gpu.items() if by} == want["victim_gpu"]
    for priority in (0, 100, 500, 1000):
        below = {
            node: total
            for node, by in want["victim_gpu"].items()
            if (total := sum(g for p, g in by.items() if p < priority))
        }
        assert ledger.victims_below(priority) == below
    for key, rule in _rules(cycle):
        gpus: dict[int, int] = {}
        pods: dict[int, int] = {}
        for job in cycle.snapshot.in_state(JobState.RUNNING):
            if is_protected(job) or not rule(job):
                continue
            for task in job.placement:
                gpus[task.node] = gpus.get(task.node, 0) + job.spec.gpu
                pods[task.node] = pods.get(task.node, 0) + 1
        assert ledger.victims_where(key, rule) == (gpus, pods), key
    assert ledger.future_room(set()).fingerprint() == want["room"]
    ledger.release_room()


def _rules(cycle: CycleContext) -> list[tuple[object, Any]]:
    """Volcano's victim rules for every queue and priority present (both configurations)."""
    queues = cycle.snapshot.queues
    keys = {(job.spec.queue, job.spec.priority) for job in cycle.snapshot.all_jobs}
    rules: list[tuple[object, Any]] = []
    for queue, priority in sorted(keys):
        for one_tier in (False, True):
            key = ("preempt", queue, priority, one_tier)
            rules.append((key, preempt_rule(queue, priority, one_tier)))
        rules.append((("reclaim", queue, 0, False), reclaim_rule(queue, queues)))
    return rules


def _forget_ledger(cycle: CycleContext) -> None:
    """Every cycle from a fresh walk: the ledger built from nothing."""
    ledger_module._LEDGER.clear()


def _run(data: dict[str, Any], policy: str, first: Any) -> dict[str, Any]:
    scenario = parse_scenario(data).with_policy(policy)
    chosen = get_policy(policy)
    wrapped = replace(chosen, phases=(first, *chosen.phases))
    return Simulator(scenario, policy=wrapped).run().result()


@settings(max_examples=15, deadline=None)
@given(scenarios())
def test_the_ledger_is_the_walk_at_every_cycle(data: dict[str, Any]) -> None:
    for policy in POLICIES:
        _run(data, policy, _check_ledger)


@settings(max_examples=15, deadline=None)
@given(scenarios())
def test_the_baselines_decide_the_same_with_a_ledger_kept_or_rebuilt(data: dict[str, Any]) -> None:
    for policy in POLICIES:
        kept = _run(data, policy, lambda cycle: None)
        assert _run(data, policy, _forget_ledger) == kept, policy


def _fresh_is(ledger: RunningLedger, snap: SimpleNamespace) -> None:
    """The ledger counts what one built afresh from the index counts, the very same views."""
    fresh = RunningLedger(0, snap.nodes)
    fresh.sync(snap)  # type: ignore[arg-type]
    running = snap.job_index.by_state[JobState.RUNNING]
    assert ledger.views.keys() == running.keys()
    assert all(ledger.views[key] is view for key, view in running.items())
    assert ledger.held == fresh.held
    assert ledger.missing.keys() == fresh.missing.keys()
    assert {n: set(d) for n, d in ledger.on_node.items() if d} == {
        n: set(d) for n, d in fresh.on_node.items() if d
    }
    assert ledger.room.fingerprint() == fresh.room.fingerprint()


def test_the_ledger_follows_the_index_however_its_running_jobs_move() -> None:
    """`sync` walks the index's running jobs in order beside the last sync's: a job gone from
    the middle, a job put again as a new view, one put again as the very same view (it
    moves to the end: sets are compared then), more changes than the walk takes on — after
    each, the ledger is what a fresh one counts."""
    nodes = builders.cluster().group("n", count=16).build()
    views = [
        builders.job(f"j{i}").running().on(i % 16, devices=[i // 16]).view(nodes)
        for i in range(100)
    ]
    index = JobIndex(views)
    snap = SimpleNamespace(queues={}, job_index=index, nodes=nodes)
    ledger = RunningLedger(index.token, nodes)
    ledger.sync(snap)  # type: ignore[arg-type]
    _fresh_is(ledger, snap)

    index.drop("j3")
    index.drop("j40")
    index.put(replace(views[5]))  # a new view of j5, equal in every field
    ledger.sync(snap)  # type: ignore[arg-type]
    _fresh_is(ledger, snap)

    index.put(views[7])  # the same view again: it moves to the end, the version stays
    index.drop("j8")
    ledger.sync(snap)  # type: ignore[arg-type]
    _fresh_is(ledger, snap)

    for i in range(10, 90):
        index.drop(f"j{i}")
    ledger.sync(snap)  # type: ignore[arg-type]
    _fresh_is(ledger, snap)

    index.put(views[50])
    index.put(views[60])
    ledger.sync(snap)  # type: ignore[arg-type]
    _fresh_is(ledger, snap)


def test_tasks_of_a_job_that_ended_while_they_were_released_are_leaving() -> None:
    """A large elastic job succeeds while one of its tasks is inside its grace period: the
    job stays in the index as Succeeded until that task is gone, and its room is on its way
    to being free like any releasing task's (found by the property above)."""

    def crit(name: str, submit: int, cancel: int) -> dict[str, Any]:
        return {
            "name": name,
            "queue": "a",
            "type": "critical",
            "submit": submit,
            "duration": 60,
            "tasks": 1,
            "gpus_per_task": 0.5,
            "checkpoint_interval": 600,
            "cancel_at": cancel,
            "gpu_model": "H100",
        }

    data = {
        "cluster": {
            "nodes": [
                {
                    "prefix": "n",
                    "count": 2,
                    "gpus": 8,
                    "gpu_model": "H100",
                    "nvlink_island": 4,
                    "nodes_per_tier1": 2,
                }
            ]
        },
        "queues": [{"name": q, "weight": 1, "reclaimable": False} for q in ("a", "b", "c")],
        "jobs": [
            crit("j0", 0, 0),
            crit("j1", 0, 0),
            crit("j2", 283, 284),
            {
                "name": "j3",
                "queue": "a",
                "type": "large-job",
                "submit": 0,
                "duration": 310,
                "tasks": 2,
                "gpus_per_task": 8,
                "checkpoint_interval": 600,
                "min_available": 1,
                "gpu_model": "H100",
            },
        ],
        "until": 43200,
    }
    for policy in POLICIES:
        _run(data, policy, _check_ledger)
