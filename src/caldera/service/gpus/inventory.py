"""What this host's GPUs are: discovered through NVML, every device by UUID.

For each device: its NVML index, UUID, name, memory, whether MIG mode is on and, if so, its
MIG instances (profile such as `1g.10gb`, the instance's own `MIG-…` UUID, its GPU and
compute instance ids). Devices NVML cannot read (a GPU that fell off the bus answers
`GPU is lost`) are listed as lost and never offered.

Islands: whole GPUs (MIG mode off, not lost) that can talk over NVLink form one island — the
connected groups of the NVLink peer-to-peer graph (every pair on an NVSwitch board, pairs or
quads on bridged cards). A host with no NVLink at all is grouped by PCIe instead: GPUs under
one PCIe switch (common ancestor at most `NVML_TOPOLOGY_MULTIPLE`) form an island. A MIG
slice never joins an island: MIG instances have no peer-to-peer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from caldera.service.gpus.nvml import (
    ERROR_GPU_IS_LOST,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    Nvml,
    NvmlError,
    error_code,
)

__all__ = [
    "Gpu",
    "Inventory",
    "MigSlice",
    "discover",
    "gpu_model",
    "islands_from_links",
    "mig_profile",
]

_MIB = 1024 * 1024
_PCIE_SWITCH = 20  # NVML_TOPOLOGY_MULTIPLE: the two devices sit below one PCIe switch tree


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG instance of a GPU: what a job asking for `profile` gets."""

    uuid: str
    profile: str  # e.g. "1g.10gb": compute slices (of 7) and memory
    memory_mib: int = 0
    gpu_instance: int = 0
    compute_instance: int = 0


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int  # NVML's (and nvidia-smi's) index; not what CUDA_VISIBLE_DEVICES carries
    uuid: str
    name: str  # e.g. "NVIDIA H100 80GB HBM3"
    memory_mib: int = 0
    mig: bool = False  # MIG mode on: only its slices can be used
    slices: tuple[MigSlice, ...] = ()
    lost: str = ""  # why the device cannot be used ("" when it can)

    @property
    def model(self) -> str:
        return gpu_model(self.name)

    @property
    def whole(self) -> bool:
        """Usable as a whole device."""
        return not self.lost and not self.mig


@dataclass(frozen=True, slots=True)
class Inventory:
    """Every device found, and the islands of the whole ones (NVML indexes)."""

    gpus: tuple[Gpu, ...]
    islands: tuple[tuple[int, ...], ...]
    source: str  # "nvml", "nvidia-smi", "fake", "virtual" or "none"
    driver: str = ""
    links: str = ""  # how islands were found: "nvlink", "pcie" or "" (none found)

    @property
    def usable(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if not g.lost)

    @property
    def lost(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.lost)


def gpu_model(name: str) -> str:
    """The model a job constrains on: "NVIDIA H100 80GB HBM3" → H100, "NVIDIA A100-SXM4-80GB" →
    A100, "Tesla V100-SXM2-32GB" → V100, "NVIDIA GeForce RTX 4090" → RTX4090."""
    words = [w for w in name.replace("NVIDIA", " ").replace("Tesla", " ").split() if w]
    while words and words[0] in {"GeForce", "Quadro", "TITAN"} and len(words) > 1:
        words = words[1:]
    if not words:
        return "GPU"
    if words[0] == "RTX" and len(words) > 1:
        return "RTX" + words[1].split("-")[0]
    return words[0].split("-")[0] or "GPU"


def mig_profile(name: str) -> str:
    """The profile in a MIG device's name ("NVIDIA A100-SXM4-80GB MIG 1g.10gb" → 1g.10gb)."""
    _, found, rest = name.partition("MIG ")
    profile = rest.split()[0] if found and rest.split() else ""
    return profile


def islands_from_links(
    indexes: Iterable[int], linked: Iterable[tuple[int, int]]
) -> tuple[tuple[int, ...], ...]:
    """Connected groups of `indexes` under the `linked` pairs, each sorted, ordered by their
    first member."""
    parent = {i: i for i in indexes}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in linked:
        if a in parent and b in parent:
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for i in sorted(parent):
        groups.setdefault(root(i), []).append(i)
    return tuple(tuple(g) for _, g in sorted(groups.items()))


def discover(nvml: Nvml, source: str = "nvml") -> Inventory:
    """Read every device, its MIG instances and the NVLink (or PCIe) islands."""
    try:
        driver = str(nvml.nvmlSystemGetDriverVersion())
    except NvmlError:
        driver = ""
    gpus: list[Gpu] = []
    handles: dict[int, object] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = str(nvml.nvmlDeviceGetUUID(handle))
            name = str(nvml.nvmlDeviceGetName(handle))
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB
            mig = _mig_enabled(nvml, handle)
            slices = _slices(nvml, handle) if mig else ()
        except NvmlError as error:
            why = "GPU is lost" if error_code(error) == ERROR_GPU_IS_LOST else str(error)
            gpus.append(Gpu(index, "", "", lost=why or "unreadable"))
            continue
        gpus.append(Gpu(index, uuid, name, memory, mig, slices))
        if not mig:
            handles[index] = handle
    islands, links = _islands(nvml, handles)
    return Inventory(tuple(gpus), islands, source, driver, links)


def _mig_enabled(nvml: Nvml, handle: object) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except NvmlError as error:
        if error_code(error) == ERROR_NOT_SUPPORTED:
            return False  # a GPU without MIG (anything before Ampere, or a consumer card)
        raise
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def _slices(nvml: Nvml, handle: object) -> tuple[MigSlice, ...]:
    found: list[MigSlice] = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except NvmlError as error:
            if error_code(error) == ERROR_NOT_FOUND:
                continue  # an empty slot: fewer instances than the maximum
            raise
        memory = int(nvml.nvmlDeviceGetMemoryInfo(mig).total) // _MIB
        # A name without its profile (no driver does that today) still gives a distinct one.
        profile = mig_profile(str(nvml.nvmlDeviceGetName(mig))) or f"mig.{memory}mib"
        found.append(
            MigSlice(
                uuid=str(nvml.nvmlDeviceGetUUID(mig)),
                profile=profile,
                memory_mib=memory,
                gpu_instance=int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                compute_instance=int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
            )
        )
    return tuple(found)


def _islands(nvml: Nvml, handles: dict[int, object]) -> tuple[tuple[tuple[int, ...], ...], str]:
    indexes = sorted(handles)
    pairs = [(a, b) for n, a in enumerate(indexes) for b in indexes[n + 1 :]]
    nvlink = [(a, b) for a, b in pairs if _nvlinked(nvml, handles[a], handles[b])]
    if nvlink:
        return islands_from_links(indexes, nvlink), "nvlink"
    pcie = [(a, b) for a, b in pairs if _same_switch(nvml, handles[a], handles[b])]
    return islands_from_links(indexes, pcie), "pcie" if pcie else ""


def _nvlinked(nvml: Nvml, first: object, second: object) -> bool:
    try:
        status = nvml.nvmlDeviceGetP2PStatus(first, second, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
    except NvmlError:
        return False
    return bool(status == nvml.NVML_P2P_STATUS_OK)


def _same_switch(nvml: Nvml, first: object, second: object) -> bool:
    try:
        level = nvml.nvmlDeviceGetTopologyCommonAncestor(first, second)
    except NvmlError:
        return False
    return int(level) <= _PCIE_SWITCH
