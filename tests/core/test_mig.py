"""MIG slices in the core: the room, placement, admission, shares, preemption and reclaim
(docs/gpus.md). A slice is all or nothing, whole GPUs and slices never mix, and a job asking
for a profile gets exactly one slice of it per task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from invariant_checks import violations

from builders import cluster, decided_evictions, decided_starts, job, queue, snapshot
from caldera.core import (
    CALDERA,
    CapacityError,
    JobView,
    PolicyConfig,
    Room,
    Snapshot,
    TaskPlacement,
    admit,
    run,
)
from caldera.core.placement import place_job
from caldera.model import (
    GPU_MILLI,
    JobSpec,
    JobState,
    JobType,
    NodeGroup,
    Queue,
    Resources,
    expand_node_groups,
    parse_profile,
    slice_milli,
)

ONE_G = ("1g.10gb",) * 7
BALANCED = ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
NOW = 10_000.0


def a100(count: int = 1, mig: tuple[tuple[str, ...], ...] = (ONE_G, ("3g.40gb", "3g.40gb"))):
    """A100 nodes: 8 GPUs on NVSwitch, the last len(mig) of them in MIG mode."""
    return cluster().group("a100", count=count, gpus=8, model="A100", mig=mig)


# -- profiles and the model ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "compute", "milli"),
    [
        ("1g.10gb", 1, 142),
        ("1g.20gb", 1, 142),  # memory does not count
        ("2g.20gb", 2, 285),
        ("3g.40gb", 3, 428),
        ("4g.40gb", 4, 571),
        ("7g.80gb", 7, 1000),
        ("1g.10gb+me", 1, 142),
        ("1c.3g.40gb", 1, 142),  # a compute instance of a 3g GPU instance
    ],
)
def test_gpu_equivalent_of_a_slice(profile: str, compute: int, milli: int) -> None:
    assert parse_profile(profile).compute == compute
    assert slice_milli(profile) == milli


@pytest.mark.parametrize("bad", ["1g", "8g.80gb", "0g.10gb", "3c.2g.20gb", "mig-1g.10gb"])
def test_invalid_profiles(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid MIG profile"):
        parse_profile(bad)


def test_a_fully_sliced_gpu_never_counts_for_more_than_one() -> None:
    for layout in (ONE_G, BALANCED, ("3g.40gb", "3g.40gb"), ("7g.80gb",)):
        assert sum(slice_milli(p) for p in layout) <= GPU_MILLI


def test_node_groups_with_mig_gpus() -> None:
    (node,) = a100().build()
    assert (node.gpus, node.island_size, node.devices) == (6, 6, 15)
    assert node.profile_of(5) is None and node.profile_of(6) == "1g.10gb"
    assert node.profile_of(14) == "3g.40gb"
    assert node.capacity_milli == 6000 + 7 * 142 + 2 * 428


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (NodeGroup("x", 1, 8, mig=(("4g.40gb", "4g.40gb"),)), "need 8 compute slices"),
        (NodeGroup("x", 1, 8, nvlink_island=4, mig=(ONE_G,)), "whole NVLink islands of 4"),
        (NodeGroup("x", 1, 1, mig=(ONE_G, ONE_G)), "2 MIG GPUs but only 1"),
        (NodeGroup("x", 1, 1, gpu_memory=40 * 1024, mig=(("7g.80gb",),)), "need 80 GB"),
    ],
)
def test_impossible_mig_layouts_are_refused(group: NodeGroup, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand_node_groups([group])


def test_a_profile_job_counts_its_gpu_equivalent() -> None:
    spec = job("s").profile("3g.40gb").gang(2).build()
    assert (spec.gpu, spec.whole_gpus, spec.gang_request.gpu) == (428, 0, 856)
    assert job("w").profile("7g.80gb").build().whole_gpus == 0  # a slice, even at 1000


# -- the room --------------------------------------------------------------------------------


def test_a_slice_is_all_or_nothing() -> None:
    nodes = a100().build()
    room = Room(nodes)
    before = room.fingerprint()
    slice_task = TaskPlacement(0, (6,), 142)
    assert room.can_take(slice_task)
    assert not room.can_take(TaskPlacement(0, (6,), 100))  # part of a slice
    assert not room.can_take(TaskPlacement(0, (6, 7), 142))  # two slices in one task
    assert not room.can_take(TaskPlacement(0, (13,), 142))  # a 3g slice at a 1g's worth
    with pytest.raises(CapacityError):
        room.take(TaskPlacement(0, (5, 6), 1000))  # a whole GPU and a slice
    with room.scratch():
        room.take(slice_task)
        assert (room.free[0][6], room.free_slices("1g.10gb"), room.whole[0]) == (0, 6, 6)
        assert not room.can_take(slice_task)
        with pytest.raises(CapacityError):
            room.take(slice_task)
    assert room.fingerprint() == before
    assert room.capacity_milli == nodes[0].capacity_milli and room.capacity_gpus == 6


# -- placement -------------------------------------------------------------------------------


def test_profile_tasks_take_slices_of_their_profile_and_nothing_else() -> None:
    nodes = expand_node_groups(
        [NodeGroup("h100", 1, 8, "H100"), NodeGroup("a100", 1, 8, "A100", mig=(ONE_G, BALANCED))]
    )
    room = Room(nodes)
    placed = place_job(room, job("s").profile("2g.20gb").build())
    assert placed == (TaskPlacement(1, (15,), 285),)
    three = place_job(room, job("t").profile("3g.40gb").build())
    assert three == (TaskPlacement(1, (16,), 428),)
    assert place_job(room, job("u").profile("3g.40gb").build()) is None  # none left
    assert place_job(room, job("v").profile("4g.40gb").build()) is None  # none offered


def test_whole_gpu_and_shared_tasks_never_land_on_a_slice() -> None:
    nodes = expand_node_groups([NodeGroup("a", 1, 2, "A100", mig=(("7g.80gb",),))])
    room = Room(nodes)
    assert nodes[0].gpus == 1 and room.free[0] == [1000, 1000]  # one GPU, one 7g slice
    first = place_job(room, job("w").gpus(1).build())
    assert first == (TaskPlacement(0, (0,), 1000),)
    assert place_job(room, job("w2").gpus(1).build()) is None
    assert place_job(room, job("half").gpus(0.5).build()) is None
    assert place_job(room, job("s").profile("7g.80gb").build()) == (TaskPlacement(0, (1,), 1000),)


def test_slices_binpack_onto_the_node_with_fewest_free() -> None:
    nodes = a100(count=2, mig=(ONE_G,)).build()
    room = Room(nodes)
    room.take(TaskPlacement(1, (7,), 142))  # node 1 has one slice in use
    placed = place_job(room, job("s").profile("1g.10gb").build())
    assert placed is not None and placed[0].node == 1


def test_a_gang_of_slices_places_all_at_once_or_not_at_all() -> None:
    room = Room(a100(mig=(ONE_G,)).build())
    before = room.fingerprint()
    assert place_job(room, job("g").profile("1g.10gb").gang(8).build()) is None
    assert room.fingerprint() == before
    placed = place_job(room, job("g").profile("1g.10gb").gang(7).build())
    assert placed is not None and sorted(t.devices[0] for t in placed) == list(range(7, 14))


# -- admission, shares, the cycle ------------------------------------------------------------


def test_admission_knows_which_profiles_exist() -> None:
    nodes = a100().build()
    queues = {"q": Queue("q")}
    ok = admit(job("a").profile("1g.10gb").gang(7).queue("q").build(), queues, {}, 0, nodes)
    assert ok.state is JobState.PENDING
    for spec in (
        job("b").profile("2g.20gb").queue("q").build(),  # nobody offers it
        job("c").profile("3g.40gb").gang(3).queue("q").build(),  # only two exist
    ):
        refused = admit(spec, queues, {}, 0, nodes)
        assert refused.state is JobState.REJECTED
        assert refused.reason == "no node in the cluster can host this request"


def test_slices_count_in_the_cluster_a_weight_splits() -> None:
    snap = snapshot(a100(), queues=[queue("a").weight(1), queue("b").weight(1)])
    assert snap.free_room.capacity_milli == 6000 + 994 + 856
    jobs = [job(f"s{i}").profile("1g.10gb").queue("a") for i in range(7)]
    decisions = run(snapshot(a100(), queues=[queue("a"), queue("b")], jobs=jobs), CALDERA)
    assert len(decisions.starts) == 7


def test_capability_counts_gpu_equivalents() -> None:
    capped = queue("a").capability(gpu=0.5)  # 500 milli: three 1g slices (426), not four
    jobs = [job(f"s{i}").profile("1g.10gb").queue("a").submitted(i) for i in range(4)]
    snap = snapshot(a100(), queues=[capped], jobs=jobs)
    assert sorted(decided_starts(snap, run(snap, CALDERA))) == ["s0", "s1", "s2"]


def test_a_critical_job_preempts_a_slice_of_its_profile_only() -> None:
    nodes = a100(mig=(("3g.40gb", "3g.40gb"),))
    running = [
        job("w").gpus(7).running(since=NOW - 60).on("a100-0"),  # every whole GPU
        job("s0").profile("3g.40gb").running(since=NOW - 600).on("a100-0"),
        job("s1").profile("3g.40gb").running(since=NOW - 60).on("a100-0"),
    ]
    critical = job("c").critical().profile("3g.40gb").submitted(NOW)
    snap = snapshot(nodes, queues=[queue("default")], jobs=[*running, critical], now=NOW)
    decisions = run(snap, CALDERA)
    # The least lost, then the most recently started: s1 gives way; w and s0 keep running.
    assert decided_evictions(decisions) == {"s1": ("preempt", "c", ())}
    assert violations(snap, decisions) == []


def test_a_queue_reclaims_slices_lent_to_another() -> None:
    nodes = a100(mig=(("3g.40gb", "3g.40gb"),))
    lent = [
        job("w").gpus(7).queue("prod").running(since=NOW - 60).on("a100-0"),
        job("b0").debug().profile("3g.40gb").queue("dev").running(since=NOW - 600).on("a100-0"),
        job("b1").debug().profile("3g.40gb").queue("dev").running(since=NOW - 60).on("a100-0"),
    ]
    wants = job("p").profile("3g.40gb").queue("prod").submitted(NOW)
    queues = [queue("prod").deserved(gpu=8), queue("dev").deserved(gpu=0.1).reclaimable()]
    snap = snapshot(nodes, queues=queues, jobs=[*lent, wants], now=NOW)
    decisions = run(snap, CALDERA)
    assert decided_evictions(decisions) == {"b1": ("reclaim", "p", ())}
    assert violations(snap, decisions) == []


# -- properties ------------------------------------------------------------------------------

PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")
LAYOUTS = (ONE_G, BALANCED, ("3g.40gb", "3g.40gb"), ("2g.20gb",) * 3)


@dataclass(frozen=True)
class World:
    snap: Snapshot


@st.composite
def mig_worlds(draw: st.DrawFn) -> World:
    mig_gpus = draw(st.sampled_from([2, 4]))
    layouts = tuple(draw(st.sampled_from(LAYOUTS)) for _ in range(mig_gpus))
    groups = [NodeGroup("a", draw(st.integers(1, 3)), 8, "A100", mig=layouts)]
    if draw(st.booleans()):
        groups.append(NodeGroup("h", 1, 8, "H100"))
    nodes = expand_node_groups(groups)
    room = Room(nodes)
    queues = {
        "prod": Queue("prod", 2, deserved=Resources(draw(st.integers(1, 8)) * GPU_MILLI)),
        "dev": Queue("dev", 1, reclaimable=True),
    }
    views = []
    for i in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["profile", "profile", "whole", "share"]))
        tasks = draw(st.integers(1, 3)) if kind != "share" else 1
        spec = JobSpec(
            id=f"j{i}",
            name=f"j{i}",
            queue=draw(st.sampled_from(sorted(queues))),
            type=draw(st.sampled_from([JobType.NORMAL, JobType.DEBUG, JobType.LARGE])),
            submit=float(draw(st.integers(0, int(NOW)))),
            tasks=tasks,
            gpu={"profile": 1000, "whole": draw(st.sampled_from([1000, 2000])), "share": 500}[kind],
            gpu_profile=draw(st.sampled_from(PROFILES)) if kind == "profile" else None,
        )
        placement = place_job(room, spec) if draw(st.booleans()) else None
        if placement is not None:
            since = NOW - draw(st.integers(0, 7200))
            views.append(
                _view(spec, JobState.RUNNING, placement, since),
            )
        else:
            views.append(_view(spec, JobState.PENDING, (), None))
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(PROFILES))
        spec = JobSpec(
            id=f"p{i}",
            name=f"p{i}",
            queue="prod",
            type=draw(st.sampled_from([JobType.CRITICAL, JobType.LARGE, JobType.NORMAL])),
            submit=NOW,
            tasks=draw(st.integers(1, 2)),
            gpu_profile=kind,
        )
        views.append(_view(spec, JobState.PENDING, (), None))
    return World(Snapshot(NOW, nodes, queues, tuple(views), PolicyConfig()))


def _view(
    spec: JobSpec, state: JobState, placement: Sequence[TaskPlacement], since: float | None
) -> JobView:
    return JobView(
        spec, state, tuple(placement), first_start=since, running_since=since, work_base=0.0
    )


@given(mig_worlds())
def test_cycles_on_mig_clusters_decide_only_what_design_allows(world: World) -> None:
    snap = world.snap
    decisions = run(snap, CALDERA)
    assert violations(snap, decisions) == []
    assert run(snap, CALDERA) == decisions  # deterministic, the snapshot unchanged
