"""Starts paced to the binder (caldera.k8s.pacing): a burst is started a binder's worth at a
time, each bind seen makes the next cycle due, and `bind_backlog: 0` starts everything at
once."""

from __future__ import annotations

from dataclasses import replace

from k8s_support import SETTINGS, World

from caldera.k8s.pacing import FLOOR, WINDOW, StartPacing
from caldera.trainingjob_api import JOB


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
    world.cluster.settle()  # the scheduler binds them
    world.rt.step()  # the binds are seen: the next cycle is due at once, no timer waited
    assert _pods(world) == 2 * FLOOR
    world.cluster.settle()
    world.rt.step()
    assert _pods(world) == 150
    assert not world.rt.pacing.paced


def test_without_a_bind_backlog_a_cycle_starts_every_pod_it_can() -> None:
    world = _burst(World(settings=replace(SETTINGS, bind_backlog=0)), 150)
    world.rt.step()
    assert _pods(world) == 150


def test_the_budget_follows_the_binds_seen_over_the_window() -> None:
    pacing = StartPacing(backlog=1.0)
    assert pacing.budget(unbound=10, now=0.0) == FLOOR - 10
    for tick in range(400):  # 200 binds a second over the window
        pacing.bound(100.0 + (tick + 1) / 200)
    assert pacing.rate(102.0) == 200.0
    assert pacing.budget(unbound=150, now=102.0) == 50
    assert pacing.budget(unbound=0, now=102.0 + WINDOW) == FLOOR  # the binds aged out
    assert StartPacing(backlog=0).budget(unbound=10_000, now=0.0) is None
