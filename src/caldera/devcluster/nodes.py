"""The dev cluster's fake GPU nodes, as KWOK keeps them (label `caldera.io/kwok=true`):
either a uniform `NodeShape` or a scenario's `ScenarioNodes`. The labels are those caldera's
controller reads (GPU feature discovery's model, memory and count; caldera's topology
labels: see `caldera.k8s.reading.nodes`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from caldera.model import Node

__all__ = ["KWOK_LABEL", "NodeShape", "Nodes", "ScenarioNodes"]

KWOK_LABEL = "caldera.io/kwok"  # the nodes KWOK manages (`=true`)


class Nodes(Protocol):
    """What the cluster needs of its nodes: how many, and their Node objects."""

    @property
    def count(self) -> int: ...

    def manifests(self) -> list[dict[str, Any]]: ...


def _node_manifest(
    name: str,
    room: Mapping[str, str],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                KWOK_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"capacity": dict(room), "allocatable": dict(room)},
    }


@dataclass(frozen=True, slots=True)
class NodeShape:
    """The fake GPU nodes: `count` nodes `kwok-gpu-00`…, grouped `per_hypernode` to a leaf
    switch (`caldera.io/hypernode`) and `hypernodes_per_spine` leaves to a spine."""

    count: int = 4
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1024Gi"
    gpu_model: str = "H100"
    gpu_memory_mib: int = 81559
    nvlink_island: int = 8
    per_hypernode: int = 2
    hypernodes_per_spine: int = 2

    def manifests(self) -> list[dict[str, Any]]:
        nodes = []
        for i in range(self.count):
            leaf = i // self.per_hypernode
            spine = leaf // self.hypernodes_per_spine
            room = {
                "cpu": self.cpu,
                "memory": self.memory,
                "nvidia.com/gpu": str(self.gpus),
                "pods": "110",
            }
            labels = {
                "nvidia.com/gpu.product": self.gpu_model,
                "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
                "nvidia.com/gpu.count": str(self.gpus),
                "caldera.io/nvlink-island": str(self.nvlink_island),
                "caldera.io/hypernode": f"leaf-{leaf}",
                "caldera.io/spine": f"spine-{spine}",
            }
            nodes.append(_node_manifest(f"kwok-gpu-{i:02d}", room, labels))
        return nodes


_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, slots=True)
class ScenarioNodes:
    """A scenario's nodes (`caldera.model.Node`, in the scenario's order) as KWOK nodes.

    Each is named `n<index>-<its name>` (index zero-padded), so that sorting by name — the
    order caldera's controller reads nodes in — keeps the scenario's order and a node's index
    is the same in the simulator and on the cluster. Topology: `caldera.io/hypernode`
    `leaf-<tier1>`, `caldera.io/spine` `spine-<tier2>`, `caldera.io/nvlink-island`; the GPU
    model, memory and count as GPU feature discovery labels them. MIG slices are not offered
    (no device plugin advertises them here)."""

    nodes: tuple[Node, ...]

    @property
    def count(self) -> int:
        return len(self.nodes)

    def names(self) -> list[str]:
        width = max(len(str(len(self.nodes) - 1)), 3)
        return [
            f"n{node.index:0{width}d}-{_NOT_DNS.sub('-', node.name.lower()).strip('-')}"[:63]
            for node in self.nodes
        ]

    def manifests(self) -> list[dict[str, Any]]:
        manifests = []
        for name, node in zip(self.names(), self.nodes, strict=True):
            room = {
                "cpu": f"{node.cpu}m",
                "memory": f"{node.memory}Mi",
                "nvidia.com/gpu": str(node.gpus),
                "pods": "110",
            }
            labels = {
                "nvidia.com/gpu.product": node.gpu_model,
                "nvidia.com/gpu.count": str(node.gpus),
                "caldera.io/nvlink-island": str(node.island_size),
                "caldera.io/hypernode": f"leaf-{node.tier1}",
                "caldera.io/spine": f"spine-{node.tier2}",
            }
            if node.gpu_memory:
                labels["nvidia.com/gpu.memory"] = str(node.gpu_memory)
            manifests.append(_node_manifest(name, room, labels))
        return manifests
