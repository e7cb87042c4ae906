"""This host as the one node the service schedules, and the UUID behind each of its devices.

The core numbers a node's devices 0, 1, …; NVML numbers GPUs by PCI order, and CUDA by
whatever `CUDA_DEVICE_ORDER` says. So the service never hands out an index: each device of
the node stands for one UUID (a whole GPU's `GPU-…`, or a MIG slice's `MIG-…`), and a task's
`CUDA_VISIBLE_DEVICES` lists those UUIDs — a job gets exactly the devices it was placed on,
however indexes shift.

Whole GPUs come first, laid out island by island so that the node's uniform `island_size`
never joins two real islands: it is the greatest common divisor of the islands' sizes (two
NVLink islands of 4 give 4; islands of 4 and 2 give 2, which keeps a 2-GPU task inside one
real island and is conservative for bigger ones). GPUs in MIG mode are not whole devices and
lost GPUs are not devices at all. Their MIG slices follow the whole GPUs, one device each
(its profile in `Node.slices`, its `MIG-…` UUID here).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from caldera.model import Node
from caldera.service.gpus.inventory import Gpu, Inventory, discover
from caldera.service.gpus.nvml import Nvml, load_nvml
from caldera.service.gpus.smi import Runner, discover_smi, run_smi

__all__ = ["HostGPUs", "detect", "host_gpus", "local_node", "virtual_gpus"]


@dataclass(frozen=True, slots=True)
class HostGPUs:
    """The node, what was found, and per node device: its UUID and physical GPU."""

    node: Node
    inventory: Inventory
    ids: tuple[str, ...]  # per device: the UUID for CUDA_VISIBLE_DEVICES ("0", "1"… if virtual)
    physical: tuple[int, ...]  # per device: the NVML index of the GPU it is (or is a slice of)
    nvml: Nvml | None = None  # the library, kept open for health polling
    instances: tuple[int | None, ...] = ()  # per device: its MIG GPU instance id, if a slice

    @property
    def count(self) -> int:
        return self.node.gpus

    @property
    def source(self) -> str:
        return self.inventory.source

    def describe(self) -> str:
        """One line for people: "8 GPU(s) (nvml)", with MIG slices and lost GPUs if any."""
        parts = [f"{self.count} GPU(s)"]
        if self.node.slices:
            parts.append(f"{len(self.node.slices)} MIG slice(s)")
        if self.inventory.lost:
            parts.append(f"{len(self.inventory.lost)} lost")
        return f"{', '.join(parts)} ({self.source})"

    def visible(self, devices: Iterable[int]) -> str:
        """CUDA_VISIBLE_DEVICES for these devices of the node."""
        return ",".join(self.ids[d] for d in devices)

    def uuid(self, device: int) -> str | None:
        """The device's UUID; None for a virtual device."""
        found = self.ids[device] if device < len(self.ids) else ""
        return found if found.startswith(("GPU-", "MIG-")) else None

    def devices_of(self, gpu: int) -> tuple[int, ...]:
        """The node's devices on physical GPU `gpu` (itself, or its MIG slices)."""
        return tuple(d for d, p in enumerate(self.physical) if p == gpu)

    def instance_of(self, device: int) -> int | None:
        return self.instances[device] if device < len(self.instances) else None

    def gpu(self, index: int) -> Gpu | None:
        return next((g for g in self.inventory.gpus if g.index == index), None)


def _host_resources() -> tuple[str, int, int]:
    cpus = os.cpu_count() or 1
    try:
        memory = int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024))
    except (ValueError, OSError, AttributeError):
        memory = 1024 * 1024
    return socket.gethostname() or "localhost", cpus * 1000, memory


def host_gpus(inventory: Inventory, nvml: Nvml | None = None) -> HostGPUs:
    """The node for what was discovered."""
    name, cpu, memory = _host_resources()
    by_index = {g.index: g for g in inventory.gpus if g.whole}
    islands = [tuple(i for i in island if i in by_index) for island in inventory.islands]
    islands = [island for island in islands if island]
    placed = {i for island in islands for i in island}
    islands.extend((i,) for i in sorted(by_index) if i not in placed)  # never left out
    whole = [by_index[i] for island in islands for i in island]
    size = math.gcd(*(len(island) for island in islands)) if islands else 1
    # MIG slices follow the whole GPUs, GPU by GPU in NVML order.
    mig = [(g, piece) for g in inventory.gpus if g.mig and not g.lost for piece in g.slices]
    models = sorted({g.model for g in whole}) or sorted({g.model for g in inventory.usable})
    memories = [g.memory_mib for g in whole] or [g.memory_mib for g, _ in mig]
    node = Node(
        index=0,
        name=name,
        gpus=len(whole),
        gpu_model=models[0] if models else "none",
        cpu=cpu,
        memory=memory,
        island_size=size or 1,
        tier1=0,
        tier2=0,
        gpu_memory=min(memories) if memories else 0,
        slices=tuple(piece.profile for _, piece in mig),
    )
    return HostGPUs(
        node,
        inventory,
        tuple(g.uuid for g in whole) + tuple(piece.uuid for _, piece in mig),
        tuple(g.index for g in whole) + tuple(g.index for g, _ in mig),
        nvml,
        (None,) * len(whole) + tuple(piece.gpu_instance for _, piece in mig),
    )


def virtual_gpus(count: int) -> HostGPUs:
    """`count` virtual devices (no driver needed): CUDA_VISIBLE_DEVICES carries indexes."""
    name, cpu, memory = _host_resources()
    node = Node(0, name, count, "virtual", cpu, memory, count or 1, 0, 0)
    inventory = Inventory((), (tuple(range(count)),) if count else (), "virtual")
    return HostGPUs(node, inventory, tuple(str(i) for i in range(count)), tuple(range(count)))


def detect(
    nvml: Nvml | None = None, run: Runner = run_smi, use_nvml: bool = True
) -> tuple[Inventory, Nvml | None]:
    """NVML first (`nvml`, else the driver's library), then nvidia-smi, else no GPUs."""
    library = nvml if nvml is not None else (load_nvml() if use_nvml else None)
    if library is not None:
        return discover(library, "nvml" if nvml is None else "fake"), library
    found = discover_smi(run)
    if found is not None:
        return found, None
    return Inventory((), (), "none"), None


def local_node(
    gpus: int | None = None, nvml: Nvml | None = None, run: Runner = run_smi
) -> tuple[Node, HostGPUs]:
    """The one node this service schedules: `gpus` virtual devices, or the detected ones."""
    host = virtual_gpus(gpus) if gpus is not None else host_gpus(*detect(nvml, run))
    return host.node, host
