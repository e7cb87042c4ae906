"""Where a preemptor's gang could go once victims leave (DESIGN §4.1): the domains a victim
search tries, and the counts that settle a search — or one domain — before it is built.

- `candidate_domains`: each node holding victims for a single task; each tier-N domain for a
  gang with a hard topology constraint; tier-1 and tier-2 domains, then the whole cluster
  as a last resort, for any other gang.
- `never_fits` (with `devices_held`): counting the whole GPUs each node could have if every
  candidate were gone; when even that cannot hold the gang, no victim set can
  (core/shortcuts/memo.py uses it to settle a search in the same cycle).
- `counted_prefix`: the same count over a domain's victims in order — the fewest a plan
  there needs, or None when no plan there exists (core/plan_search.py).

Counts are optimistic (NVLink islands, CPU and memory ignored): they only ever rule out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from caldera.core.placement import can_host, whole_slots
from caldera.core.room import Room
from caldera.core.victims import Unit, VictimIndex
from caldera.model import GPU_MILLI, JobSpec, TopologyMode

__all__ = ["candidate_domains", "counted_prefix", "free_on", "never_fits"]


def candidate_domains(
    room: Room, spec: JobSpec, index: VictimIndex | None = None
) -> list[Sequence[int] | None]:
    """Node sets to try; None stands for the whole cluster (binpack order).

    A single task needs one node: only nodes holding victims are worth trying. A gang with a
    hard topology constraint needs one tier-N domain. Any other gang tries tier-1 and tier-2
    domains (compact, cheap to search) and the whole cluster only as a last resort.
    """
    if spec.tasks == 1:
        nodes = room.nodes
        candidates = index.by_node if index is not None else range(len(nodes))
        return [(i,) for i in sorted(candidates) if can_host(nodes[i], spec)]
    topology = spec.topology
    tiers = (1, 2) if topology is None else (topology.highest_tier,)
    found: list[Sequence[int] | None] = []
    for tier in tiers:
        domains = room.tier1_nodes if tier <= 1 else room.tier2_nodes
        found.extend(
            tuple(nodes)
            for _, nodes in sorted(domains.items())
            if index is None or any(n in index.by_node for n in nodes)
        )
    if topology is None or topology.mode is TopologyMode.SOFT:
        found.append(None)
    return found


def free_on(room: Room, spec: JobSpec, nodes: Sequence[int] | None) -> int:
    models = spec.gpu_models
    if spec.gpu_profile is not None:  # MIG: free slices of the profile, by GPU-equivalent
        return room.free_slices(spec.gpu_profile, nodes, models) * spec.gpu
    if nodes is None:
        return room.free_whole(models) * GPU_MILLI
    free = 0
    for index in nodes:
        if models is None or room.nodes[index].gpu_model in models:
            free += sum(room.free[index]) if spec.gpu < GPU_MILLI else room.whole[index] * GPU_MILLI
    return free


def counted_prefix(
    room: Room, spec: JobSpec, nodes: Sequence[int] | None, units: Sequence[Unit]
) -> int | None:
    """A necessary condition that leaves the room alone: the shortest prefix of `units` after
    whose eviction, counting per node the whole GPUs that would be free, `min_available`
    tasks could fit (None: not even all of them). NVLink islands, CPU and memory are
    ignored, so the count is optimistic: it is a lower bound on the victims any plan in this
    domain needs, and None settles the domain."""
    need = spec.whole_gpus
    models = spec.gpu_models
    allowed = None if nodes is None else set(nodes)
    nodes_of = room.nodes
    if need == 0:  # a GPU share: count milli-GPUs
        target = spec.gpu * spec.min_available
        have = free_on(room, spec, nodes)
        if have >= target:
            return 0
        for length, unit in enumerate(units, start=1):
            for task in unit.placements:
                if (allowed is None or task.node in allowed) and (
                    models is None or nodes_of[task.node].gpu_model in models
                ):
                    have += task.gpu
            if have >= target:
                return length
        return None
    tasks = 0
    target = spec.min_available
    if nodes is None:
        for model in room.models if models is None else models:
            for level, bucket in enumerate(room.buckets.get(model, ())):
                tasks += len(bucket) * (level // need)
    else:
        for index in nodes:
            if models is None or nodes_of[index].gpu_model in models:
                tasks += room.whole[index] // need
    if tasks >= target:
        return 0
    freed: dict[tuple[int, int], int] = {}
    gained: dict[int, int] = {}
    # A task counts once: only a job running above its minimum has more than one unit
    # (its extra tasks, then its whole gang), so only such a job's tasks are remembered.
    counted: set[tuple[str, int]] = set()
    free = room.free
    whole = room.whole
    for length, unit in enumerate(units, start=1):
        job = unit.job
        placement = job.placement
        several = len(placement) > job.spec.min_available
        for i in unit.tasks:
            task = placement[i]
            node = task.node
            if allowed is not None and node not in allowed:
                continue
            if several:
                if (job.id, i) in counted:
                    continue
                counted.add((job.id, i))
            if models is not None and nodes_of[node].gpu_model not in models:
                continue
            node_free = free[node]
            milli = task.milli
            for device in task.devices:
                held = freed.get((node, device), 0)
                before = node_free[device] + held
                if before < GPU_MILLI <= before + milli:
                    extra = gained.get(node, 0)
                    base = whole[node]
                    tasks += (base + extra + 1) // need - (base + extra) // need
                    gained[node] = extra + 1
                freed[(node, device)] = held + milli
        if tasks >= target:
            return length
    return None


def never_fits(room: Room, spec: JobSpec, devices: Mapping[int, int]) -> bool:
    """Could the gang not be placed even with every task of some holders gone (`devices`:
    node -> the GPU devices their tasks use there)? Counts per node the whole GPUs that could
    then be free — optimistic: NVLink islands, topology, CPU and memory are ignored — so True
    proves that every victim search among those holders fails, without building its
    candidates. Whole-GPU tasks only (False: not known)."""
    per_task = spec.whole_gpus
    if per_task == 0 or spec.gpu % GPU_MILLI:
        return False
    models = spec.gpu_models
    need = spec.min_available
    tasks = whole_slots(room, per_task, models, need)
    if tasks >= need:
        return False
    whole, nodes = room.whole, room.nodes
    for node, count in devices.items():
        info = nodes[node]
        if models is not None and info.gpu_model not in models:
            continue
        free = whole[node]
        tasks += min(info.gpus, free + count) // per_task - free // per_task
        if tasks >= need:
            return _never_in_one_domain(room, spec, devices)
    return True


def _never_in_one_domain(room: Room, spec: JobSpec, devices: Mapping[int, int]) -> bool:
    """`never_fits` for a gang that must run inside one domain of its tier (`hard`
    topology): the same count, domain by domain."""
    topology = spec.topology
    if topology is None or topology.mode is not TopologyMode.HARD or spec.min_available < 2:
        return False
    per_task, need = spec.whole_gpus, spec.min_available
    whole, nodes = room.whole, room.nodes
    for usable, _ in room.domain_layout(topology.highest_tier, spec.gpu_models).values():
        tasks = 0
        for node in usable:
            tasks += min(nodes[node].gpus, whole[node] + devices.get(node, 0)) // per_task
        if tasks >= need:
            return False
    return True
