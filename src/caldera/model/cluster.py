"""Nodes and their place in the topology: NVLink island → node → tier 1 → tier 2 → cluster.

A scenario describes nodes as groups; `expand_node_groups` turns each group into named nodes
and numbers the topology domains. A node's devices are its whole GPUs (0 … gpus-1, in NVLink
islands) followed by its MIG slices (gpus … gpus+len(slices)-1), one profile each: a GPU in
MIG mode is never a whole device (caldera.model.mig).

Tier-1 domains ("hypernodes", leaf switches) hold `nodes_per_tier1` consecutive nodes;
tier-2 domains (spines) hold `tier1_per_tier2` tier-1 domains. Domains never span two groups:
different hardware sits behind different switches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from caldera.model.mig import layout_problem, slice_milli
from caldera.model.resources import GPU_MILLI

__all__ = ["GPU_MILLI", "Node", "NodeGroup", "expand_node_groups"]


@dataclass(frozen=True, slots=True)
class Node:
    """One machine. `index` is its position in the cluster and its identity in the core."""

    index: int
    name: str
    gpus: int
    gpu_model: str
    cpu: int  # millicores
    memory: int  # MiB
    island_size: int  # GPUs per NVLink island; gpus is a multiple of it
    tier1: int
    tier2: int
    gpu_memory: int = 0  # MiB per GPU, 0 when unknown
    slices: tuple[str, ...] = ()  # MIG slices offered, one profile per device after the GPUs
    pods: int = 0  # tasks (pods) it may hold at once; 0: no limit (Kubernetes: `pods` allocatable)

    @property
    def islands(self) -> int:
        return self.gpus // self.island_size if self.island_size else 0

    @property
    def devices(self) -> int:
        """Whole GPUs and MIG slices."""
        return self.gpus + len(self.slices)

    @property
    def capacity_milli(self) -> int:
        """Whole GPUs plus MIG slices by their GPU-equivalent (caldera.model.mig)."""
        return self.gpus * GPU_MILLI + sum(slice_milli(p) for p in self.slices)

    def profile_of(self, device: int) -> str | None:
        """The MIG profile of a device, None for a whole GPU."""
        return self.slices[device - self.gpus] if device >= self.gpus else None

    def island_of(self, device: int) -> int:
        return device // self.island_size


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """A run of identical nodes, as a scenario file declares them."""

    prefix: str
    count: int
    gpus: int
    gpu_model: str = "GPU"
    cpu: int = 64_000
    memory: int = 512 * 1024
    nvlink_island: int = 0  # 0: one island spanning the node
    nodes_per_tier1: int = 0  # 0: the whole group is one tier-1 domain
    tier1_per_tier2: int = 0  # 0: all the group's tier-1 domains form one tier-2 domain
    gpu_memory: int = 0
    names: tuple[str, ...] = ()  # explicit node names (traces); default prefix-0, prefix-1, …
    # GPUs in MIG mode, each as the profiles of its slices; the rest of `gpus` stay whole.
    mig: tuple[tuple[str, ...], ...] = ()


def expand_node_groups(groups: Iterable[NodeGroup]) -> tuple[Node, ...]:
    """Expand groups into nodes with globally numbered tier-1 and tier-2 domains."""
    nodes: list[Node] = []
    next_tier1 = 0
    next_tier2 = 0
    for group in groups:
        island = group.nvlink_island or group.gpus or 1
        if group.gpus and group.gpus % island:
            raise ValueError(
                f"node group {group.prefix!r}: gpus ({group.gpus}) is not a multiple of "
                f"nvlink_island ({island})"
            )
        whole, island, slices = _mig_split(group, island)
        per_tier1 = group.nodes_per_tier1 or max(group.count, 1)
        per_tier2 = group.tier1_per_tier2 or max(-(-group.count // per_tier1), 1)
        tier1_used = 0
        for i in range(group.count):
            local_tier1 = i // per_tier1
            tier1_used = local_tier1 + 1
            name = group.names[i] if group.names else f"{group.prefix}-{i}"
            nodes.append(
                Node(
                    index=len(nodes),
                    name=name,
                    gpus=whole,
                    gpu_model=group.gpu_model,
                    cpu=group.cpu,
                    memory=group.memory,
                    island_size=island,
                    tier1=next_tier1 + local_tier1,
                    tier2=next_tier2 + local_tier1 // per_tier2,
                    gpu_memory=group.gpu_memory,
                    slices=slices,
                )
            )
        next_tier1 += tier1_used
        next_tier2 += -(-tier1_used // per_tier2) if tier1_used else 0
    names = [node.name for node in nodes]
    if len(set(names)) != len(names):
        seen: set[str] = set()
        duplicate = next(n for n in names if n in seen or seen.add(n))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate node name {duplicate!r}")
    return tuple(nodes)


def _mig_split(group: NodeGroup, island: int) -> tuple[int, int, tuple[str, ...]]:
    """(whole GPUs, island size, slices) of a group with some GPUs in MIG mode. MIG GPUs are
    the last ones and whole NVLink islands of them (MIG instances have no peer-to-peer);
    with one island spanning the node, the whole GPUs left form one island."""
    if not group.mig:
        return group.gpus, island, ()
    where = f"node group {group.prefix!r}"
    if len(group.mig) > group.gpus:
        raise ValueError(f"{where}: {len(group.mig)} MIG GPUs but only {group.gpus} GPUs")
    for profiles in group.mig:
        problem = layout_problem(profiles, group.gpu_memory // 1024)
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
    whole = group.gpus - len(group.mig)
    if island < group.gpus:
        if len(group.mig) % island:
            raise ValueError(
                f"{where}: MIG mode must take whole NVLink islands of {island} GPUs, "
                f"not {len(group.mig)}"
            )
    else:
        island = whole or 1
    return whole, island, tuple(p for profiles in group.mig for p in profiles)
