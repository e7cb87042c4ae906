"""The quick counts that skip victim searches (issue 12) must never skip one that could succeed.

`domains.never_fits` and `placement.whole_slots` are optimistic counts: when they say "never",
the full search must agree. Checked on the random worlds of the cycle properties, taking every
running job that could ever be a victim as a candidate (the largest pool any phase builds).
"""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from test_cycle_properties import NOW, World, worlds

from caldera.core import PolicyConfig, Snapshot
from caldera.core.context import CycleContext
from caldera.core.domains import never_fits
from caldera.core.placement import place_job, whole_slots
from caldera.core.plan_search import find_plan
from caldera.core.pools import VictimPools
from caldera.core.victims import VictimIndex, devices_held, is_protected, victim_units
from caldera.model import GPU_MILLI, JobState


def _candidates(world: World, config: PolicyConfig) -> VictimIndex:
    units = [
        unit
        for view in world.jobs
        if view.state is JobState.RUNNING and not is_protected(view)
        for unit in victim_units(view, config, NOW)
    ]
    return VictimIndex(units)


@given(st.one_of(worlds(), worlds(contended=True)), st.data())
def test_never_fits_only_when_no_victim_set_can_place_the_job(
    world: World, data: st.DataObject
) -> None:
    pending = [view for view in world.jobs if view.state is JobState.PENDING]
    if not pending:
        return
    job = data.draw(st.sampled_from(pending))
    snap = world.snapshot()
    index = _candidates(world, snap.config)
    if not never_fits(snap.free_room, job.spec, index.devices(set())):
        event("the count cannot tell")
        return
    event("never fits")
    with snap.free_room.scratch() as room:
        assert find_plan(room, job.spec, index) is None
        # The claim itself: with every candidate's tasks given back, the job still does not
        # fit (so no subset of them can make it fit, whatever a search would try).
        for unit in index.units:
            if unit.whole:
                for task in unit.placements:
                    room.give(task)
        assert place_job(room, job.spec, maximum=job.spec.min_available) is None


@given(st.one_of(worlds(), worlds(contended=True)), st.data())
def test_whole_slots_bounds_what_placement_finds(world: World, data: st.DataObject) -> None:
    """Placement never starts more whole-GPU tasks than the count allows."""
    pending = [
        v
        for v in world.jobs
        if v.state is JobState.PENDING and v.spec.gpu >= GPU_MILLI and v.spec.gpu_profile is None
    ]
    if not pending:
        return
    spec = data.draw(st.sampled_from(pending)).spec
    with world.snapshot().free_room.scratch() as room:
        slots = whole_slots(room, spec.whole_gpus, spec.gpu_models)
        placed = place_job(room, spec, minimum=1)
    assert placed is None or len(placed) <= slots


@pytest.mark.parametrize("kind", ["own", "borrowers"])
@given(world=st.one_of(worlds(), worlds(contended=True)), data=st.data())
def test_a_pool_told_without_building_it_is_the_pool_built(
    kind: str, world: World, data: st.DataObject
) -> None:
    """`VictimPools.own_never_fits` (preempt) counts the own pool's candidates, and
    `VictimPools.empty` (reclaim, both pools) looks at a pool's candidate list, without
    building the pool: when the count says "never", the search over the pool it then builds
    fails; `empty` says whether that pool has units; and the pool built after either is the
    one built without them (the same units in the same order)."""
    pending = [view for view in world.jobs if view.state is JobState.PENDING]
    if not pending:
        return
    job = data.draw(st.sampled_from(pending))
    snap = world.snapshot()
    with snap.free_room.scratch() as room:
        counted = VictimPools(CycleContext(snap, room))
        settled = kind == "own" and counted.own_never_fits(job)
        empty = counted.empty(kind, job)
        built = counted._index(kind, job)
        plain = VictimPools(CycleContext(snap, room))._index(kind, job)
        assert [unit.key for unit in built.units] == [unit.key for unit in plain.units]
        assert empty == (not built.units)
        if not settled:
            event(f"{kind}: the count cannot tell" if kind == "own" else f"{kind}: not counted")
            return
        event("own: never fits, with candidates" if built.units else "own: no candidates")
        assert find_plan(room, job.spec, built) is None


@given(world=st.one_of(worlds(), worlds(contended=True)), data=st.data())
def test_own_devices_from_the_index_are_the_candidates_devices(
    world: World, data: st.DataObject
) -> None:
    """The own pool's devices (`own_never_fits`) come from the job index's per-node count of
    the queue's lower-priority jobs, less those passed over and those evicted after the
    candidates were chosen: always the count over the live candidates themselves."""
    pending = [view for view in world.jobs if view.state is JobState.PENDING]
    if not pending:
        return
    job = data.draw(st.sampled_from(pending))
    # Later on, running jobs have escalated (weight) and left their cooldowns.
    later = data.draw(st.sampled_from([0.0, 3600.0, 86_400.0, 30 * 86_400.0]))
    snap = Snapshot(NOW + later, world.nodes, dict(world.queues), world.jobs, world.config)
    with snap.free_room.scratch() as room:
        pools = VictimPools(CycleContext(snap, room))
        chosen, passed_over = pools._chosen_for("own", job)
        weights = pools._weights
        escalated = [v for v in passed_over if weights.get(v.id, 0.0) >= job.spec.priority]
        event("own: escalated jobs passed over" if escalated else "own: none escalated")
        ids = [victim.id for victim in chosen]
        gone = data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
        pools.cycle.decided.evicted.update(gone)  # signalled since
        event("own: candidates evicted since" if gone else "own: none evicted since")
        assert pools.devices("own", job) == devices_held(chosen, pools.cycle.decided.evicted)
