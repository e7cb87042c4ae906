"""Starts paced to the binder (caldera.k8s.pacing): a burst is started a binder's worth at a
time, each bind seen makes the next cycle due, the limit follows the binds' waits, and
`bind_wait: 0` starts everything at once."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from k8s_support import NAMESPACE, SETTINGS, World

from caldera.k8s import ClusterUnavailable, pacing
from caldera.k8s.effects import flush
from caldera.k8s.effects.flush import ADMITTED_WAITS
from caldera.k8s.pacing import ADJUST_EVERY, FLOOR, StartPacing, bind_wait_of
from caldera.trainingjob_api import JOB
from polling import wait_for


def _burst(world: World, jobs: int) -> World:
    world.hypernode("a", "n", count=25).start()  # 200 GPUs
    for number in range(jobs):
        world.submit(f"j{number:03d}", gpus=1)
    return world


def _pods(world: World) -> int:
    return len(world.cluster.pods)


def _started(world: World) -> set[str]:
    return {pod["metadata"]["labels"][JOB] for pod in world.cluster.pods.values()}


def test_a_burst_starts_a_binder_s_worth_of_pods_per_cycle_and_each_bind_makes_room() -> None:
    world = _burst(World(), 150)
    world.rt.step()  # admits all 150; the cycle may start FLOOR pods, none bound yet
    assert _started(world) == {f"j{number:03d}" for number in range(FLOOR)}  # the policy's order
    assert world.rt.pacing.paced
    for more in (2 * FLOOR, 3 * FLOOR, 150):
        world.cluster.settle()  # the scheduler binds them
        world.rt.step()  # the binds are seen: the next cycle is due at once, no timer waited
        assert _pods(world) == more
    assert not world.rt.pacing.paced


def test_without_a_bind_wait_a_cycle_starts_every_pod_it_can() -> None:
    world = _burst(World(settings=replace(SETTINGS, bind_wait=0)), 150)
    world.rt.step()
    assert _pods(world) == 150


def test_the_limit_grows_while_binds_come_in_time_and_starts_were_held_back() -> None:
    pacing = StartPacing(bind_wait=1.5)
    assert pacing.budget(unbound=10, now=0.0) == FLOOR - 10
    pacing.paced = True  # the last cycle left starts for later
    for _ in range(FLOOR):
        pacing.bound(0.4)
    assert pacing.budget(unbound=0, now=ADJUST_EVERY / 2) == FLOOR  # not yet: too soon
    grown = pacing.budget(unbound=0, now=ADJUST_EVERY)
    assert grown == int(FLOOR * 1.25)
    pacing.paced = False  # nothing held back: fast binds are no reason to allow more
    pacing.bound(0.4)
    assert pacing.budget(unbound=0, now=2 * ADJUST_EVERY) == grown
    pacing.bound(2.0)  # one bind came late: the binder's queue is too long
    assert pacing.budget(unbound=0, now=3 * ADJUST_EVERY) == int(grown * 0.8)
    pacing.bound(9.0)
    assert pacing.budget(unbound=0, now=4 * ADJUST_EVERY) == FLOOR  # never below
    assert pacing.budget(unbound=0, now=9 * ADJUST_EVERY) == FLOOR  # no binds: unchanged
    # A binder with its own rhythm (Volcano's scheduling cycles): every bind late, but it had bound
    # every pod while starts waited, so it can take more.
    pacing.paced = True
    pacing.bound(2.5)
    assert pacing.budget(unbound=0, now=10 * ADJUST_EVERY) == int(FLOOR * 1.25)
    pacing.bound(2.5)  # late, and the binder still has pods: too many
    assert pacing.budget(unbound=5, now=11 * ADJUST_EVERY) == FLOOR - 5
    assert StartPacing(bind_wait=0).budget(unbound=10_000, now=0.0) is None


def test_a_paced_burst_costs_three_writes_per_single_pod_job_and_no_event() -> None:
    """Most of a paced burst's jobs are admitted in one step and start a few steps later:
    their Admitted Event waits for the start and goes with it (quiet: none is sent), so each
    job is still its admission status, its pod and its status once the pod runs."""
    world = World(settings=replace(SETTINGS, scheduler_name="default-scheduler"))
    _burst(world, 150)
    mark = len(world.cluster.actions)
    for _ in range(6):
        world.step()
    assert {world.state(f"j{number:03d}") for number in range(150)} == {"Running"}
    writes = Counter(key.split("/")[1].split("-")[0] for _, _, key in world.cluster.actions[mark:])
    assert set(writes.values()) == {3}, writes
    assert [e for number in range(150) for e in world.events(f"j{number:03d}")] == []


def test_an_admitted_job_that_says_nothing_more_has_its_event_after_a_while() -> None:
    """Not reached by any cycle (the budget stays spent): no Waiting Event to go with."""
    world = World().hypernode("a", "n", count=1).start()
    world.rt.pacing.budget = lambda unbound, now: 0  # type: ignore[method-assign]
    world.submit("late", gpus=1)
    world.step()
    world.step(ADMITTED_WAITS - 1)
    assert world.state("late") == "Pending" and world.events("late") == []
    world.step(2)
    assert world.events("late") == ["Admitted"]
    world.step(ADMITTED_WAITS + 1)
    assert world.events("late") == ["Admitted"]  # once


def test_the_statuses_a_start_waits_for_go_first_and_a_paced_flush_leaves_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(flush, "ROUND", 10)
    monkeypatch.setattr(pacing, "FLOOR", 3)
    world = World().hypernode("a", "n", count=2).start()
    world.submit("filler", gpus=8)
    world.step()
    for number in range(30):  # admitted before the small ones; they wait while filler runs
        world.submit(f"big{number:02d}", tasks=2, gpus=8)
    for number in range(5):
        world.submit(f"small{number}", gpus=1)
    mark = len(world.cluster.actions)
    world.rt.step()  # admits 35 jobs, starts 3 small ones (paced), leaves 2
    actions = world.cluster.actions[mark:]
    statuses = [key for _, kind, key in actions if kind == "trainingjob/status"]
    pods = [i for i, (verb, kind, _) in enumerate(actions) if (verb, kind) == ("create", "pod")]
    # the starts' first statuses lead the first round, their pods right after it; then the
    # flush, paced, stops: the statuses left are the next step's
    assert {f"{NAMESPACE}/small{number}" for number in range(3)} <= set(statuses)
    assert len(pods) == 3 and len(statuses) == 10
    burst = {f"{NAMESPACE}/big{n:02d}" for n in range(30)} | {
        f"{NAMESPACE}/small{n}" for n in range(5)
    }
    assert burst - set(statuses) <= set(world.rt.actuator.dirty)  # 25 left, none lost
    world.cluster.settle()
    world.rt.step()
    assert {world.state(f"small{number}") for number in range(5)} <= {"Running", "Pending"}
    assert all(world.state(f"big{number:02d}") == "Pending" for number in range(30))


def test_a_paced_flush_leaves_the_admissions_to_the_intake_s_writers_and_loses_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With several writers the admissions' first statuses a paced flush did not write go
    out while the next step runs; one the server never got is queued again; a start of a
    job whose first status is still on its way follows it."""
    monkeypatch.setattr(flush, "ROUND", 10)
    monkeypatch.setattr(pacing, "FLOOR", 3)
    world = World().hypernode("a", "n", count=2).start(writers=8)
    world.submit("filler", gpus=8)
    world.step()
    for number in range(30):
        world.submit(f"big{number:02d}", tasks=2, gpus=8)
    for number in range(5):
        world.submit(f"small{number}", gpus=1)
    patch_status = world.cluster.patch_job_status
    gone = {"big29"}  # the server is unreachable for its first status

    def patch_or_fail(namespace: str, name: str, status: Any) -> Any:
        if name in gone:
            gone.discard(name)
            raise ClusterUnavailable("cannot reach the Kubernetes API at fake://: reset")
        return patch_status(namespace, name, status)

    world.cluster.patch_job_status = patch_or_fail  # type: ignore[method-assign]
    world.rt.step()
    assert len(world.rt.actuator.dirty) < 10  # the step returned with the rest on their way
    names = [f"big{n:02d}" for n in range(29)]
    wait_for("the admissions written behind the flush", lambda: _admitted(world, names))
    assert "big29" not in _admitted_names(world)
    world.cluster.settle()
    world.rt.step()  # queued again, written now; the 2 small jobs left start
    wait_for("big29 admitted", lambda: "big29" in _admitted_names(world))
    world.rt.step()
    assert {world.state(f"small{n}") for n in range(5)} <= {"Running", "Pending"}
    writes = Counter(key for _, kind, key in world.cluster.actions if kind == "trainingjob/status")
    assert all(writes[f"{NAMESPACE}/{name}"] == 1 for name in names)  # each once


def _admitted_names(world: World) -> set[str]:
    return {
        name
        for (_, name), job in list(world.cluster.jobs.items())
        if (job.get("status") or {}).get("state")
    }


def _admitted(world: World, names: list[str]) -> bool:
    return set(names) <= _admitted_names(world)


def test_the_bind_wait_defaults_to_the_binder_s_rhythm_unless_set() -> None:
    assert bind_wait_of(replace(SETTINGS, scheduler_name="default-scheduler")) == 1.5
    assert bind_wait_of(replace(SETTINGS, scheduler_name="volcano")) == 4.0
    assert bind_wait_of(replace(SETTINGS, scheduler_name="volcano", bind_wait=0.5)) == 0.5
