"""A fake NVML beside the real seam (`caldera.service.gpus.nvml`): the same calls, the same
pynvml error classes, devices described as data.

Shapes from real machines (`SHAPES`, also `caldera serve --fake-gpus NAME`):
- `h100-sxm`: 8 × H100 SXM on an NVSwitch board — every pair peer-to-peer over NVLink, one
  island of 8;
- `pcie-4+4`: 8 × L40S PCIe cards, no NVLink, four below each of two PCIe switches (one per
  CPU socket) — two islands of 4;
- `a100-mig`: 8 × A100-SXM4-80GB, GPUs 0-3 in MIG mode with mixed profiles (the device
  plugin's `mixed` strategy): 7 × 1g.10gb, 7 × 1g.10gb, the `all-balanced` layout
  (2 × 1g.10gb, 2g.20gb, 3g.40gb) and 2 × 3g.40gb; GPUs 4-7 whole on NVSwitch;
- `h100-lost`: `h100-sxm` whose GPU 5 fell off the bus (every query answers "GPU is lost").

Health can be changed while it runs — `xid()`, `lose()`, `heat()`, `ecc()` — or, for a
server in another process, through a JSON file (`FakeNvml.from_file`) that it re-reads
whenever it changes:

    {"shape": "a100-mig", "xids": [{"gpu": 4, "xid": 79}], "lost": [5],
     "temperature": {"3": 95}, "ecc": {"2": 1}}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from caldera.service.gpus.nvml import (
    ERROR_GPU_IS_LOST,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_TIMEOUT,
    EVENT_DOUBLE_BIT_ECC,
    EVENT_XID,
    NO_INSTANCE,
    NvmlError,
)

__all__ = ["SHAPES", "FakeGpu", "FakeMig", "FakeNvml", "fake_uuid"]

_MIB = 1024 * 1024
_SYSTEM = 50  # NVML_TOPOLOGY_SYSTEM: across CPU sockets
_SWITCH = 20  # NVML_TOPOLOGY_MULTIPLE: below one PCIe switch tree
XID_FALLEN_OFF_BUS = 79
_P2P_NOT_SUPPORTED: int = pynvml.NVML_P2P_STATUS_NOT_SUPPORTED


def fake_uuid(prefix: str, *parts: object) -> str:
    """A stable UUID in NVIDIA's format (GPU-… or MIG-…) for a fake device."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()
    return f"{prefix}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@dataclass
class FakeMig:
    profile: str
    memory_mib: int
    gpu_instance: int
    compute_instance: int = 0
    uuid: str = ""


@dataclass
class FakeGpu:
    name: str
    memory_mib: int
    uuid: str = ""
    mig_capable: bool = False
    mig: list[FakeMig] | None = None  # None: MIG mode off
    switch: int = 0  # which PCIe switch it sits below
    lost: bool = False
    temperature: int = 38
    ecc_uncorrected: int = 0


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None


@dataclass
class _EventSet:
    devices: set[int] = field(default_factory=set)


class FakeNvml:
    """Implements `caldera.service.gpus.nvml.Nvml` over `FakeGpu`s.

    `nvlink`: pairs of GPU indexes joined by NVLink, or "all" (an NVSwitch board). MIG
    devices never report peer-to-peer.
    """

    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE

    def __init__(
        self,
        gpus: Iterable[FakeGpu],
        nvlink: str | Iterable[tuple[int, int]] = (),
        driver: str = "550.90.07",
        name: str = "fake",
    ) -> None:
        self.gpus = list(gpus)
        for i, gpu in enumerate(self.gpus):
            gpu.uuid = gpu.uuid or fake_uuid("GPU", name, i)
            for j, mig in enumerate(gpu.mig or ()):
                mig.uuid = mig.uuid or fake_uuid("MIG", name, i, j)
        self.all_linked = nvlink == "all"
        self.links = {frozenset(p) for p in ([] if isinstance(nvlink, str) else nvlink)}
        self.driver = driver
        self.events: list[tuple[int, int, int, int, int]] = []  # gpu, type, data, gi, ci
        self.sets: list[_EventSet] = []
        self.initialised = False
        self._reload: Callable[[], None] | None = None

    # -- changing health (tests, or the JSON file) ---------------------------------------------

    def xid(
        self, gpu: int, code: int, gpu_instance: int = NO_INSTANCE, compute: int = NO_INSTANCE
    ) -> None:
        self.events.append((gpu, EVENT_XID, code, gpu_instance, compute))

    def lose(self, gpu: int) -> None:
        """The GPU falls off the bus: XID 79, then every query answers "GPU is lost"."""
        self.xid(gpu, XID_FALLEN_OFF_BUS)
        self.gpus[gpu].lost = True

    def heat(self, gpu: int, celsius: int) -> None:
        self.gpus[gpu].temperature = celsius

    def ecc(self, gpu: int, uncorrected: int) -> None:
        """Set the volatile uncorrected (double-bit) ECC count, with its event."""
        self.gpus[gpu].ecc_uncorrected = uncorrected
        self.events.append((gpu, EVENT_DOUBLE_BIT_ECC, 0, NO_INSTANCE, NO_INSTANCE))

    # -- the Nvml protocol ---------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise NvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def _gpu(self, handle: _Handle) -> FakeGpu:
        self._refresh()
        gpu = self.gpus[handle.gpu]
        if gpu.lost:
            raise NvmlError(ERROR_GPU_IS_LOST)
        return gpu

    def _mig(self, handle: _Handle) -> FakeMig:
        gpu = self._gpu(handle)
        assert handle.mig is not None and gpu.mig is not None
        return gpu.mig[handle.mig]

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        if handle.mig is not None:
            return self._mig(handle).uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        if handle.mig is not None:
            return f"{self._gpu(handle).name} MIG {self._mig(handle).profile}"
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Any:
        if handle.mig is not None:
            total = self._mig(handle).memory_mib
        else:
            total = self._gpu(handle).memory_mib
        return SimpleNamespace(total=total * _MIB, used=0, free=total * _MIB)

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        gpu = self._gpu(handle)
        if not gpu.mig_capable:
            raise NvmlError(ERROR_NOT_SUPPORTED)
        mode = 1 if gpu.mig is not None else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        return 7 if self._gpu(handle).mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        gpu = self._gpu(handle)
        if gpu.mig is None or index >= len(gpu.mig):
            raise NvmlError(ERROR_NOT_FOUND)
        return _Handle(handle.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        return self._mig(handle).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:
        return self._mig(handle).compute_instance

    def nvmlDeviceGetP2PStatus(self, first: _Handle, second: _Handle, index: int) -> int:
        a, b = self._gpu(first), self._gpu(second)
        if index != self.NVML_P2P_CAPS_INDEX_NVLINK:
            raise NvmlError(ERROR_NOT_SUPPORTED)
        if a.mig is not None or b.mig is not None:
            return _P2P_NOT_SUPPORTED
        linked = self.all_linked or frozenset((first.gpu, second.gpu)) in self.links
        return int(self.NVML_P2P_STATUS_OK) if linked else _P2P_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, first: _Handle, second: _Handle) -> int:
        a, b = self._gpu(first), self._gpu(second)
        return _SWITCH if a.switch == b.switch else _SYSTEM

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise NvmlError(ERROR_NOT_SUPPORTED)
        return self._gpu(handle).temperature

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, kind: int, counter: int) -> int:
        if (kind, counter) != (self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, self.NVML_VOLATILE_ECC):
            raise NvmlError(ERROR_NOT_SUPPORTED)
        return self._gpu(handle).ecc_uncorrected

    def nvmlEventSetCreate(self) -> _EventSet:
        event_set = _EventSet()
        self.sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: _Handle, events: int, event_set: _EventSet) -> None:
        self._gpu(handle)
        if events & (EVENT_XID | EVENT_DOUBLE_BIT_ECC):
            event_set.devices.add(handle.gpu)

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> Any:
        self._refresh()
        for n, (gpu, kind, data, gi, ci) in enumerate(self.events):
            if gpu in event_set.devices:
                del self.events[n]
                return SimpleNamespace(
                    device=_Handle(gpu),
                    eventType=kind,
                    eventData=data,
                    gpuInstanceId=gi,
                    computeInstanceId=ci,
                )
        raise NvmlError(ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        if event_set in self.sets:
            self.sets.remove(event_set)

    # -- from a file ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        if self._reload is not None:
            self._reload()

    @classmethod
    def from_file(cls, path: Path) -> FakeNvml:
        """A shape named in a JSON file, whose health follows later edits of that file."""
        data = _read(path)
        shape = SHAPES.get(str(data.get("shape", "")))
        if shape is None:
            raise ValueError(f"{path}: 'shape' must be one of {', '.join(sorted(SHAPES))}")
        fake = shape()
        applied = {"xids": 0, "mtime": -1.0}

        def reload() -> None:
            try:
                mtime = path.stat().st_mtime
            except OSError:
                return
            if mtime == applied["mtime"]:
                return
            applied["mtime"] = mtime
            current = _read(path)
            xids = list(current.get("xids") or [])
            for entry in xids[int(applied["xids"]) :]:
                fake.xid(int(entry["gpu"]), int(entry["xid"]))
            applied["xids"] = len(xids)
            for gpu in current.get("lost") or []:
                if not fake.gpus[int(gpu)].lost:
                    fake.lose(int(gpu))
            for gpu, celsius in (current.get("temperature") or {}).items():
                fake.heat(int(gpu), int(celsius))
            for gpu, count in (current.get("ecc") or {}).items():
                if fake.gpus[int(gpu)].ecc_uncorrected != int(count):
                    fake.ecc(int(gpu), int(count))

        reload()
        fake._reload = reload
        return fake

    @classmethod
    def named(cls, name_or_path: str) -> FakeNvml:
        """A shape by name (`SHAPES`), or a JSON file naming one."""
        shape = SHAPES.get(name_or_path)
        if shape is not None:
            return shape()
        path = Path(name_or_path)
        if not path.is_file():
            raise ValueError(
                f"--fake-gpus: {name_or_path!r} is neither a shape "
                f"({', '.join(sorted(SHAPES))}) nor a JSON file"
            )
        return cls.from_file(path)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read a fake GPU description ({error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a fake GPU description is a JSON object")
    return data


# -- shapes from real machines -----------------------------------------------------------------


def h100_sxm() -> FakeNvml:
    gpus = [FakeGpu("NVIDIA H100 80GB HBM3", 81559, mig_capable=True) for _ in range(8)]
    return FakeNvml(gpus, nvlink="all", name="h100-sxm")


def h100_lost() -> FakeNvml:
    fake = h100_sxm()
    fake.gpus[5].lost = True
    return fake


def pcie_two_switches() -> FakeNvml:
    gpus = [FakeGpu("NVIDIA L40S", 46068, switch=i // 4) for i in range(8)]
    return FakeNvml(gpus, name="pcie-4+4")


_A100_MIG = {"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192}
_A100_LAYOUTS: list[list[tuple[str, int]]] = [
    [("1g.10gb", gi) for gi in range(7, 14)],
    [("1g.10gb", gi) for gi in range(7, 14)],
    [("3g.40gb", 2), ("2g.20gb", 5), ("1g.10gb", 13), ("1g.10gb", 14)],  # all-balanced
    [("3g.40gb", 1), ("3g.40gb", 2)],
]


def a100_mig() -> FakeNvml:
    gpus = []
    for i in range(8):
        layout = _A100_LAYOUTS[i] if i < len(_A100_LAYOUTS) else None
        gpus.append(
            FakeGpu(
                "NVIDIA A100-SXM4-80GB",
                81920,
                mig_capable=True,
                mig=[FakeMig(p, _A100_MIG[p], gi) for p, gi in layout] if layout else None,
            )
        )
    return FakeNvml(gpus, nvlink="all", name="a100-mig")


SHAPES: dict[str, Callable[[], FakeNvml]] = {
    "h100-sxm": h100_sxm,
    "h100-lost": h100_lost,
    "pcie-4+4": pcie_two_switches,
    "a100-mig": a100_mig,
}
