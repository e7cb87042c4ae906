"""`volcano-seed001`'s node states kept across placements (baselines/volcano/nodestates.py)
give the same node as looking at every node afresh, whatever changed the room in between:
placements, gives, scratch rollbacks, MIG slices, pod limits, scopes and GPU models."""

from __future__ import annotations

import random

import pytest

from builders import cluster
from caldera.baselines.volcano import nodeorder_place, nodeorder_score, nodestates
from caldera.baselines.volcano.nodestates import node_state, node_states
from caldera.core.placement import fit_on_node
from caldera.core.room import Room, TaskPlacement
from caldera.model import JobSpec, JobType, Node

PROFILE = "1g.10gb"


def _nodes() -> tuple[Node, ...]:
    built = (
        cluster()
        .group("a", count=5, gpus=8, island=4, cpu=16, memory_gib=64)
        .group("b", count=4, gpus=4, model="A100", cpu=8, memory_gib=32)
        .group("m", count=3, gpus=8, model="A100", mig=((PROFILE,) * 7,))
        .build()
    )
    # Two nodes with a pod limit small enough to be reached.
    return tuple(
        Node(n.index, n.name, n.gpus, n.gpu_model, n.cpu, n.memory, n.island_size, n.tier1,
             n.tier2, n.gpu_memory, n.slices, pods=3 if n.index in (1, 6) else 0)
        for n in built
    )  # fmt: skip


def _spec(rng: random.Random) -> JobSpec:
    profile = PROFILE if rng.random() < 0.15 else None
    gpu = rng.choice([0, 250, 500, 1000, 2000, 4000, 8000])
    models = rng.choice([None, None, None, frozenset({"A100"})])
    return JobSpec(
        "p", "p", "default", JobType.NORMAL, 0.0,
        gpu=gpu, cpu=rng.choice([0, 500, 2000, 6000]), memory=rng.choice([0, 1024, 20480]),
        gpu_models=models, gpu_profile=profile,
    )  # fmt: skip


def _afresh(room: Room, spec: JobSpec, within: list[int] | None) -> int:
    """The node nodeorder chooses looking at every node: best score, lowest index; -1."""
    best, best_score = -1, -1
    for index in within if within is not None else range(len(room.nodes)):
        if spec.gpu_models is not None and room.nodes[index].gpu_model not in spec.gpu_models:
            continue
        if fit_on_node(room, index, spec.gpu, spec.cpu, spec.memory, spec.gpu_profile) is None:
            continue
        score = nodeorder_score(room, index, spec)
        if score > best_score or (score == best_score and index < best):
            best, best_score = index, score
    return best


def _check_index(room: Room, profile: str | None) -> None:
    """Nodes share a state number exactly when their states are equal; each state's lowest."""
    states = node_states(room, profile)
    fresh = [node_state(room, index, profile) for index in range(len(room.nodes))]
    for a in range(len(fresh)):
        for b in range(len(fresh)):
            assert (states.state_of[a] == states.state_of[b]) == (fresh[a] == fresh[b])
    lowest = {fresh[i]: i for i in reversed(range(len(fresh)))}
    assert sorted(index for _, index in states.lowest_of_each()) == sorted(lowest.values())


def _place_as_a_fresh_look_would(
    room: Room, spec: JobSpec, within: list[int] | None, held: list[TaskPlacement]
) -> None:
    """Place `spec` by nodeorder (the index told) on the node a look at every node picks."""
    want = _afresh(room, spec, within)
    task = nodeorder_place(room, spec, within)
    assert (task.node if task is not None else -1) == want
    if task is not None:
        held.append(task)


def _steps(room: Room, rng: random.Random, steps: int, held: list[TaskPlacement]) -> None:
    for _ in range(steps):
        spec = _spec(rng)
        roll = rng.random()
        if roll < 0.2 and held:
            room.give(held.pop(rng.randrange(len(held))))
        elif roll < 0.3:
            _check_index(room, None)
            _check_index(room, PROFILE)
        else:
            within = rng.sample(range(len(room.nodes)), 5) if rng.random() < 0.3 else None
            _place_as_a_fresh_look_would(room, spec, within, held)


@pytest.mark.parametrize("seed", range(12))
def test_placements_match_a_fresh_look_at_every_node(seed: int) -> None:
    rng = random.Random(seed)
    room = Room(_nodes())
    held: list[TaskPlacement] = []
    for _ in range(6):
        _steps(room, rng, 25, held)
        with room.scratch():  # a what-if: placed, given, then all rolled back
            _steps(room, rng, 25, list(held))
        _check_index(room, None)
        _check_index(room, PROFILE)


def test_numbering_again_when_too_many_states_keeps_the_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nodestates, "_MAX_STATES", 6)
    rng = random.Random(99)
    room = Room(_nodes())
    held: list[TaskPlacement] = []
    _steps(room, rng, 150, held)
    _check_index(room, None)
    _check_index(room, PROFILE)


def test_a_give_and_a_take_that_leave_every_count_equal_are_seen() -> None:
    """Pod slots, cpu and memory back where they were, the devices not: node 0's state
    changed although no count did."""
    room = Room(_nodes())
    first = [TaskPlacement(node, (0, 1, 2, 3), 1000, 1000, 1024) for node in (0, 2)]
    for task in first:
        room.take(task)
    _check_index(room, None)
    room.give(first[0])
    room.take(TaskPlacement(0, (4, 5, 6, 7), 1000, 1000, 1024))
    _check_index(room, None)
    spec = JobSpec("p", "p", "default", JobType.NORMAL, 0.0, gpu=4000)
    want = fit_on_node(room, 0, 4000, 0, 0)  # node 0's first island, free now
    assert want is not None and want.devices == (0, 1, 2, 3)
    assert nodeorder_place(room, spec, [0, 2]) == want


def _take_or_give(room: Room, rng: random.Random, held: list[TaskPlacement]) -> None:
    """One change: a pod placed by nodeorder (the index told), or one given back or taken
    behind the index's back (as a runtime or a rollback does)."""
    roll = rng.random()
    if roll < 0.3 and held:
        room.give(held.pop(rng.randrange(len(held))))
    elif roll < 0.5:
        spec = _spec(rng)
        for index in rng.sample(range(len(room.nodes)), len(room.nodes)):
            task = fit_on_node(room, index, spec.gpu, spec.cpu, spec.memory, spec.gpu_profile)
            if task is not None:
                room.take(task)
                held.append(task)
                break
    else:
        _place_as_a_fresh_look_would(room, _spec(rng), None, held)


@pytest.mark.parametrize("seed", range(16))
def test_looks_across_partial_rollbacks_and_scratches_match_a_fresh_look(seed: int) -> None:
    """The index learns what changed from the room's journal inside a scratch, and from what
    its own entries were after one: rollbacks to marks before and after its last look,
    scratches opened and closed with and without changes outside between them."""
    rng = random.Random(1000 + seed)
    room = Room(_nodes())
    held: list[TaskPlacement] = []
    for _ in range(8):
        for _ in range(rng.randrange(4)):  # outside a scratch: a runtime's starts and ends
            _take_or_give(room, rng, held)
        with room.scratch():
            outer = list(held)
            marks: list[tuple[int, list[TaskPlacement]]] = []
            for _ in range(40):
                roll = rng.random()
                if roll < 0.15:
                    marks.append((room.mark(), list(held)))
                elif roll < 0.3 and marks:
                    mark, kept = marks.pop(rng.randrange(len(marks)))
                    del marks[sum(1 for m, _ in marks if m <= mark) :]
                    room.rollback(mark)
                    held = kept
                elif roll < 0.4:
                    _check_index(room, None)
                    _check_index(room, PROFILE)
                else:
                    _take_or_give(room, rng, held)
        held = outer
        _check_index(room, None)
        _check_index(room, PROFILE)
