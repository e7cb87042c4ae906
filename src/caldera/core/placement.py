"""Where tasks go: devices on a node, nodes for a gang, domains for a topology constraint.

Rules (DESIGN §3, allocate):
1. A multi-GPU task stays inside one NVLink island; a task bigger than an island takes whole
   islands, so its devices are never scattered.
2. Whole-GPU tasks binpack: nodes with the fewest whole free GPUs that still fit come first,
   which keeps whole nodes free for gangs. GPU shares go first onto partly used devices,
   best fit.
3. A gang starts only if at least `min_available` tasks are placed at once; with `hard`
   topology they all sit inside one tier-N domain, the fullest one that fits (binpack again);
   `soft` tries that first and falls back to anywhere.
4. A task that asks for a MIG profile takes one free slice of that profile (the lowest on
   its node); nodes with the fewest such slices free come first (binpack). Whole GPUs and
   slices never mix: a whole-GPU or shared task never lands on a slice.

Every function here changes the room only through `Room.take` and either returns a complete
placement or leaves the room exactly as it found it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from caldera.core.room import Room, TaskPlacement
from caldera.model import GPU_MILLI, JobSpec, Node, TopologyMode

__all__ = [
    "can_host",
    "domains_for",
    "fit_on_node",
    "node_allows",
    "place_job",
    "place_on_nodes",
    "whole_slots",
]


def node_allows(room: Room, index: int, models: frozenset[str] | None) -> bool:
    return models is None or room.nodes[index].gpu_model in models


def can_host(node: Node, spec: JobSpec) -> bool:
    """Could this node, empty, hold one task of the job (GPUs only: model, count, profile)?"""
    if spec.gpu_models is not None and node.gpu_model not in spec.gpu_models:
        return False
    if spec.gpu_profile is not None:
        return spec.gpu_profile in node.slices
    return node.gpus * GPU_MILLI >= spec.gpu


def fit_on_node(
    room: Room, index: int, gpu: int, cpu: int, memory: int, profile: str | None = None
) -> TaskPlacement | None:
    """The best spot for one task on one node, or None. Does not change the room."""
    if room.cpu[index] < cpu or room.memory[index] < memory or room.pods[index] < 1:
        return None
    if profile is not None:
        free_slices = room.slices[index].get(profile)
        if not free_slices:
            return None
        return TaskPlacement(index, (free_slices[0],), room.milli_of[profile], cpu, memory)
    if gpu == 0:
        return TaskPlacement(index, (), 0, cpu, memory)
    free = room.free[index]
    node = room.nodes[index]
    if gpu < GPU_MILLI:
        best = -1
        best_free = GPU_MILLI + 1
        for device in range(node.gpus):
            left = free[device]
            if gpu <= left < best_free:
                best, best_free = device, left
        if best < 0:
            return None
        return TaskPlacement(index, (best,), gpu, cpu, memory)
    need = gpu // GPU_MILLI
    if room.whole[index] < need:
        return None
    size = node.island_size
    if size >= node.gpus:
        devices = tuple(d for d in range(node.gpus) if free[d] == GPU_MILLI)[:need]
        return TaskPlacement(index, devices, GPU_MILLI, cpu, memory)
    islands = [
        [d for d in range(i * size, (i + 1) * size) if free[d] == GPU_MILLI]
        for i in range(node.gpus // size)
    ]
    if need <= size:
        fitting = [island for island in islands if len(island) >= need]
        if not fitting:
            return None
        chosen = min(fitting, key=len)  # best fit; min() keeps the lowest island on ties
        return TaskPlacement(index, tuple(chosen[:need]), GPU_MILLI, cpu, memory)
    full_count, rest = divmod(need, size)
    full = [island for island in islands if len(island) == size]
    if len(full) < full_count:
        return None
    chosen = [d for island in full[:full_count] for d in island]
    if rest:
        used = set(chosen)
        fitting = [i for i in islands if len(i) >= rest and not used.intersection(i)]
        if not fitting:
            return None
        chosen.extend(min(fitting, key=len)[:rest])
    return TaskPlacement(index, tuple(sorted(chosen)), GPU_MILLI, cpu, memory)


def place_on_nodes(
    room: Room, spec: JobSpec, nodes: Iterable[int], minimum: int, maximum: int
) -> tuple[TaskPlacement, ...] | None:
    """Place between `minimum` and `maximum` tasks over `nodes`, in that order, packing as
    many tasks per node as fit. On success the room is taken; on failure it is untouched."""
    placed: list[TaskPlacement] = []
    models = spec.gpu_models
    gpu, cpu, memory, profile = spec.gpu, spec.cpu, spec.memory, spec.gpu_profile
    for index in nodes:
        if models is not None and room.nodes[index].gpu_model not in models:
            continue
        while len(placed) < maximum:
            task = fit_on_node(room, index, gpu, cpu, memory, profile)
            if task is None:
                break
            room.take(task)
            placed.append(task)
        if len(placed) >= maximum:
            break
    if len(placed) >= minimum:
        return tuple(placed)
    for task in reversed(placed):
        room.give(task)
    return None


def _binpack_order(room: Room, spec: JobSpec) -> Iterator[int]:
    """Nodes in binpacking order for this job's task shape, cluster-wide."""
    if spec.gpu_profile is not None:
        yield from _slice_order(room, spec.gpu_profile)
        return
    models = room.models if spec.gpu_models is None else sorted(spec.gpu_models)
    need = spec.gpu // GPU_MILLI
    if 0 < spec.gpu < GPU_MILLI:
        seen: set[int] = set()
        for model in models:
            for index in tuple(room.partial.get(model, ())):
                seen.add(index)
                yield index
        need = 1
        for level in range(need, room.max_gpus + 1):
            for model in models:
                if model in room.buckets:
                    for index in tuple(room.buckets[model][level]):
                        if index not in seen:
                            yield index
        return
    for level in range(need, room.max_gpus + 1):
        for model in models:
            if model in room.buckets:
                yield from tuple(room.buckets[model][level])


def _slice_order(room: Room, profile: str) -> list[int]:
    """Nodes with a free slice of `profile`, fewest free first (binpack), then by index."""
    slices = room.slices
    nodes = [i for i in room.profile_nodes.get(profile, ()) if slices[i][profile]]
    return sorted(nodes, key=lambda i: (len(slices[i][profile]), i))


def _domain_nodes(room: Room, tier: int) -> dict[int, list[int]]:
    return room.tier1_nodes if tier <= 1 else room.tier2_nodes


def domains_for(room: Room, tier: int) -> list[tuple[int, list[int]]]:
    """Tier-N domains as (id, nodes), the fullest first: binpacking at the domain level."""
    free = room.tier1_whole if tier <= 1 else room.tier2_whole
    return sorted(_domain_nodes(room, tier).items(), key=lambda item: (free[item[0]], item[0]))


def _in_domain_order(room: Room, nodes: Sequence[int]) -> list[int]:
    whole = room.whole
    return sorted(nodes, key=lambda index: (whole[index], index))


def whole_slots(
    room: Room, per_task: int, models: Iterable[str] | None, enough: int | None = None
) -> int:
    """How many tasks of `per_task` whole GPUs the free whole GPUs could hold, each on one
    node (CPU, memory and NVLink ignored: an upper bound); counting stops at `enough`."""
    tasks = 0
    for model in room.models if models is None else models:
        for level, bucket in enumerate(room.buckets.get(model, ())):
            if level >= per_task:
                tasks += len(bucket) * (level // per_task)
                if enough is not None and tasks >= enough:
                    return tasks
    return tasks


def _enough_whole(room: Room, spec: JobSpec, minimum: int) -> bool:
    """A quick necessary condition: enough free whole GPUs (or slices) in all, and for
    whole-GPU tasks, enough nodes with a task's worth of them each."""
    if spec.gpu_profile is not None:
        return room.free_slices(spec.gpu_profile, models=spec.gpu_models) >= minimum
    per_task = spec.whole_gpus
    need = per_task * minimum
    if need == 0:
        return True
    if room.free_whole(spec.gpu_models) < need:
        return False
    if spec.gpu % GPU_MILLI:
        return True
    return whole_slots(room, per_task, spec.gpu_models, minimum) >= minimum


def place_job(
    room: Room,
    spec: JobSpec,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    within: Sequence[int] | None = None,
) -> tuple[TaskPlacement, ...] | None:
    """Place a whole gang at once (at least `minimum`, default `min_available`, at most
    `maximum`, default all tasks), honouring topology. `within` limits the nodes."""
    low = spec.min_available if minimum is None else minimum
    high = spec.tasks if maximum is None else maximum
    if not _enough_whole(room, spec, low):
        return None
    if within is not None:
        return place_on_nodes(room, spec, _in_domain_order(room, within), low, high)
    topology = spec.topology
    if topology is not None and high > 1:
        need = spec.whole_gpus * low
        free = room.tier1_whole if topology.highest_tier <= 1 else room.tier2_whole
        for domain, nodes in domains_for(room, topology.highest_tier):
            if free[domain] < need:
                continue
            placed = place_on_nodes(room, spec, _in_domain_order(room, nodes), low, high)
            if placed is not None:
                return placed
        if topology.mode is TopologyMode.HARD:
            return None
    return place_on_nodes(room, spec, _binpack_order(room, spec), low, high)
