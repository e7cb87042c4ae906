"""Hypothesis properties of one cycle over random clusters, queues and jobs (DESIGN §3).

Random snapshots are built to be valid (running jobs fit their nodes and their queues'
capabilities, through an independent first-fit placer), then one cycle must:
- decide only what §3 allows (`invariant_checks.violations`): no node over capacity, no gang
  below `min_available`, no queue over capability, hard topology and NVLink islands honoured, no
  protected / critical / conformance victim, no debug preemptor, no equal-priority
  preemption, cooldown, reclaim floors, the eviction budget;
- be deterministic: the same snapshot, or an equal one built afresh, gives equal decisions;
- leave the snapshot unchanged: the room's fingerprint is the same before and after.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st
from invariant_checks import violations

from caldera.core import CALDERA, JobView, PolicyConfig, Snapshot, TaskPlacement, run
from caldera.model import (
    GPU_MILLI,
    Checkpointing,
    JobSpec,
    JobState,
    JobType,
    Node,
    NodeGroup,
    Queue,
    Resources,
    TopologyMode,
    TopologySpec,
    expand_node_groups,
)

NOW = 20_000.0
MODELS = ("H100", "A100")


@st.composite
def node_groups(draw: st.DrawFn) -> tuple[Node, ...]:
    groups = []
    for i in range(draw(st.integers(1, 2))):
        gpus = draw(st.sampled_from([4, 8]))
        groups.append(
            NodeGroup(
                prefix=f"g{i}",
                count=draw(st.integers(1, 4)),
                gpus=gpus,
                gpu_model=MODELS[i],
                cpu=64_000,
                memory=512 * 1024,
                nvlink_island=draw(st.sampled_from([0, 2, 4])),
                nodes_per_tier1=draw(st.integers(0, 2)),
                tier1_per_tier2=draw(st.integers(0, 2)),
            )
        )
    return expand_node_groups(groups)


@st.composite
def queues(draw: st.DrawFn, total_gpus: int) -> dict[str, Queue]:
    result: dict[str, Queue] = {}
    for i in range(draw(st.integers(1, 3))):
        deserved = draw(st.integers(1, total_gpus)) * GPU_MILLI
        guarantee = draw(st.one_of(st.none(), st.integers(0, deserved // GPU_MILLI)))
        capability = draw(st.one_of(st.none(), st.integers(deserved // GPU_MILLI, total_gpus)))
        result[f"q{i}"] = Queue(
            name=f"q{i}",
            weight=draw(st.integers(1, 4)),
            deserved=Resources(deserved),
            guarantee=None if guarantee is None else Resources(guarantee * GPU_MILLI),
            capability=None if capability is None else Resources(capability * GPU_MILLI),
            reclaimable=draw(st.booleans()),
        )
    return result


@st.composite
def job_specs(draw: st.DrawFn, index: int, queue_names: list[str], types: list[JobType]) -> JobSpec:
    tasks = draw(st.integers(1, 3))
    gpu = draw(
        st.sampled_from(
            [250, 500, 1000, 2000, 4000, 8000] if tasks == 1 else [1000, 2000, 4000, 8000]
        )
    )
    topology = draw(
        st.one_of(
            st.none(),
            st.builds(TopologySpec, st.sampled_from(list(TopologyMode)), st.sampled_from([1, 2])),
        )
    )
    labels = {"protected": "true"} if draw(st.integers(0, 9)) == 0 else {}
    return JobSpec(
        id=f"j{index}",
        name=f"j{index}",
        queue=draw(st.sampled_from(queue_names)),
        type=draw(st.sampled_from(types)),
        submit=float(draw(st.integers(0, int(NOW)))),
        tasks=tasks,
        gpu=gpu,
        cpu=draw(st.sampled_from([0, 4_000, 16_000])),
        min_available=draw(st.integers(1, tasks)),
        labels=labels,
        namespace="kube-system" if draw(st.integers(0, 14)) == 0 else "default",
        checkpoint=Checkpointing(
            draw(st.sampled_from([None, 600.0, 3600.0])),
            draw(st.sampled_from([0.0, 60.0, 300.0])),
            draw(st.booleans()),
        ),
        expected_duration=draw(st.sampled_from([None, 3600.0, 36_000.0])),
        topology=topology,
        gpu_models=draw(st.sampled_from([None, frozenset({"H100"}), frozenset({"A100"})])),
    )


def first_fit(
    nodes: tuple[Node, ...], free: list[list[int]], cpu: list[int], spec: JobSpec, count: int
) -> list[TaskPlacement] | None:
    """Lowest node, lowest devices; whole-GPU tasks inside one island (or whole islands)."""
    placed: list[TaskPlacement] = []
    for node in nodes:
        if spec.gpu_models is not None and node.gpu_model not in spec.gpu_models:
            continue
        while len(placed) < count and cpu[node.index] >= spec.cpu:
            devices = _devices(node, free[node.index], spec.gpu)
            if devices is None:
                break
            milli = min(spec.gpu, GPU_MILLI)
            for d in devices:
                free[node.index][d] -= milli
            cpu[node.index] -= spec.cpu
            placed.append(TaskPlacement(node.index, devices, milli, spec.cpu, spec.memory))
    if len(placed) < count:
        for t in placed:
            for d in t.devices:
                free[t.node][d] += t.milli
            cpu[t.node] += t.cpu
        return None
    return placed


def _devices(node: Node, free: list[int], gpu: int) -> tuple[int, ...] | None:
    if gpu < GPU_MILLI:
        for d, left in enumerate(free):
            if left >= gpu:
                return (d,)
        return None
    need = gpu // GPU_MILLI
    size = node.island_size
    if need >= size:
        whole = [
            i
            for i in range(node.gpus // size)
            if all(free[d] == GPU_MILLI for d in range(i * size, (i + 1) * size))
        ]
        if need % size or len(whole) < need // size:
            return None
        return tuple(d for i in whole[: need // size] for d in range(i * size, (i + 1) * size))
    for i in range(node.gpus // size):
        island = [d for d in range(i * size, (i + 1) * size) if free[d] == GPU_MILLI]
        if len(island) >= need:
            return tuple(island[:need])
    return None


@dataclass(frozen=True)
class World:
    nodes: tuple[Node, ...]
    queues: dict[str, Queue]
    jobs: tuple[JobView, ...]
    config: PolicyConfig

    def snapshot(self) -> Snapshot:
        return Snapshot(NOW, self.nodes, dict(self.queues), self.jobs, self.config)


@st.composite
def worlds(draw: st.DrawFn, contended: bool = False) -> World:
    """`contended`: fill the cluster with low-priority work, then queue large/critical jobs."""
    nodes = draw(node_groups())
    total = sum(n.gpus for n in nodes)
    qs = draw(queues(total))
    free = [[GPU_MILLI] * n.gpus for n in nodes]
    cpu = [n.cpu for n in nodes]
    held: dict[str, Resources] = {}
    views: list[JobView] = []
    # Mostly fresh low-priority work running and higher-priority work waiting: contention.
    running_types = [JobType.NORMAL, JobType.NORMAL, JobType.DEBUG, JobType.LARGE, JobType.CRITICAL]
    pending_types = [JobType.LARGE, JobType.LARGE, JobType.CRITICAL, JobType.NORMAL, JobType.DEBUG]
    if contended:
        running_types = [JobType.NORMAL, JobType.NORMAL, JobType.NORMAL, JobType.DEBUG]
        pending_types = [JobType.LARGE, JobType.LARGE, JobType.CRITICAL]
    kinds = [True] * draw(st.integers(0, 40 if contended else 20))
    kinds += [False] * draw(st.integers(1 if contended else 0, 4 if contended else 6))
    for i, running in enumerate(kinds):
        spec = draw(job_specs(i, sorted(qs), running_types if running else pending_types))
        if running:
            count = draw(st.integers(spec.min_available, spec.tasks))
            after = held.get(spec.queue, Resources()) + spec.task_request.scaled(count)
            if not after.fits_in(qs[spec.queue].capability):
                continue
            placement = first_fit(nodes, free, cpu, spec, count)
            if placement is None:
                continue
            held[spec.queue] = after
            since = NOW - draw(st.integers(0, 7200))
            evicted = draw(st.one_of(st.none(), st.floats(NOW - 1200, NOW - 1)))
            views.append(
                JobView(
                    spec,
                    JobState.RUNNING,
                    tuple(placement),
                    first_start=since,
                    running_since=since,
                    work_base=float(draw(st.integers(0, 600))),
                    last_evicted_at=evicted,
                    evictions=0 if evicted is None else 1,
                )
            )
        else:
            views.append(JobView(spec, JobState.PENDING))
    config = PolicyConfig(eviction_budget=draw(st.sampled_from([0.3, 0.6, 1.0])))
    return World(nodes, qs, tuple(views), config)


@given(st.one_of(worlds(), worlds(contended=True)))
def test_cycle_decides_only_what_design_allows(world: World) -> None:
    snap = world.snapshot()
    decisions = run(snap, CALDERA)
    assert violations(snap, decisions) == []


@given(worlds())
def test_cycle_is_deterministic(world: World) -> None:
    """Equal snapshots, each built afresh (as a runtime rebuilding its state would), give
    equal decisions."""
    assert run(world.snapshot(), CALDERA) == run(world.snapshot(), CALDERA)


@given(worlds())
def test_cycle_leaves_the_snapshot_unchanged(world: World) -> None:
    snap = world.snapshot()
    before = snap.free_room.fingerprint()
    jobs_before = snap.jobs
    run(snap, CALDERA)
    assert snap.free_room.fingerprint() == before
    assert snap.jobs == jobs_before


def room_order(snap: Snapshot) -> tuple[object, ...]:
    """The room's indexes in iteration order (`fingerprint()` sorts them, hiding order)."""
    room = snap.free_room
    return (
        tuple((m, tuple(tuple(b) for b in bs)) for m, bs in room.buckets.items()),
        tuple((m, tuple(p)) for m, p in room.partial.items()),
    )


# The smallest world that showed B6 (fixed): one 2-GPU job, two empty 4-GPU nodes.
_TWO_NODES = expand_node_groups([NodeGroup("n", count=2, gpus=4)])
_B6 = World(
    _TWO_NODES,
    {"q0": Queue("q0")},
    (JobView(JobSpec("j0", "j0", "q0", JobType.NORMAL, 0.0, gpu=2000), JobState.PENDING),),
    PolicyConfig(),
)


@example(_B6)
@given(worlds())
def test_cycle_is_repeatable_on_one_snapshot(world: World) -> None:
    snap = world.snapshot()
    assert run(snap, CALDERA) == run(snap, CALDERA)


@example(_B6)
@given(worlds())
def test_cycle_leaves_the_room_order_unchanged(world: World) -> None:
    snap = world.snapshot()
    before = room_order(snap)
    run(snap, CALDERA)
    assert room_order(snap) == before


@given(worlds())
def test_pending_jobs_start_when_the_cluster_is_empty_enough(world: World) -> None:
    """Liveness: with nothing running, the first job in cycle order that fits an empty
    cluster on its own and its queue's capability is started."""
    pending = tuple(j for j in world.jobs if j.state is JobState.PENDING)
    snap = Snapshot(NOW, world.nodes, dict(world.queues), pending, world.config)
    decisions = run(snap, CALDERA)
    assert violations(snap, decisions) == []
    if pending and not decisions.starts:
        # then no pending job could run alone on the empty cluster
        for j in pending:
            alone = Snapshot(NOW, world.nodes, dict(world.queues), (j,), world.config)
            assert run(alone, CALDERA).starts == (), f"{j.id} fits alone but nothing started"
