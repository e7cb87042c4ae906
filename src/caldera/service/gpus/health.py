"""GPU health: what makes a GPU sick, read from NVML (or nvidia-smi), judged the same way.

Signals, per physical GPU:
- **XID errors** (NVML's critical-XID events). An application's own fault leaves the GPU
  healthy — XID 13, 31, 43, 45, 68, 109, the list NVIDIA's Kubernetes device plugin ignores.
  XIDs after which the GPU's state is gone (48 double-bit ECC, 62/64 internal
  micro-controller and remapping failures, 74 NVLink, 79 fallen off the bus, 95 uncontained
  ECC, 119/120 GSP) are **fatal**; any other XID **drains**. An XID that names a MIG
  instance sickens that slice alone, unless it is fatal.
- **Double-bit ECC errors**: the volatile uncorrected count rising above what it was at
  start — fatal.
- **Temperature** at or above `max_temperature` — drains, and the GPU comes back once it
  has cooled below `resume_temperature`.
- **Lost**: any query answering "GPU is lost" — fatal.

A sick GPU takes no new work. Its running tasks leave: gracefully (SIGTERM, the grace
period, an emergency checkpoint) when it drains, at once (SIGKILL, resume from the last
periodic checkpoint) when the error is fatal. Everything but temperature stays until the
service restarts (after the GPU was reset), which reads every counter afresh.

Pollers return `Finding`s (sick) and `Recovered`s; `GpuReading`s are kept for `/metrics`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from caldera.service.gpus.inventory import Gpu
from caldera.service.gpus.nvml import (
    ERROR_GPU_IS_LOST,
    EVENT_DOUBLE_BIT_ECC,
    EVENT_XID,
    NO_INSTANCE,
    Nvml,
    NvmlError,
    error_code,
)
from caldera.service.gpus.smi import Runner, run_smi

__all__ = [
    "APPLICATION_XIDS",
    "FATAL_XIDS",
    "Finding",
    "GpuReading",
    "HealthSettings",
    "NvmlHealth",
    "Recovered",
    "Severity",
    "SmiHealth",
    "xid_severity",
]

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
FATAL_XIDS = frozenset({48, 62, 64, 74, 79, 95, 119, 120})
_MAX_EVENTS_PER_POLL = 256


class Severity(StrEnum):
    IGNORED = "ignored"  # the application's own error; the GPU is fine
    DRAIN = "drain"  # no new work; running work leaves gracefully
    FATAL = "fatal"  # no new work; running work stops now


@dataclass(frozen=True, slots=True)
class HealthSettings:
    interval: float = 10.0  # seconds between two polls
    max_temperature: int = 90  # °C: at or above, the GPU drains
    resume_temperature: int = 80  # °C: below, a GPU drained for heat comes back
    ignore_xids: frozenset[int] = APPLICATION_XIDS
    fatal_xids: frozenset[int] = FATAL_XIDS


def xid_severity(xid: int, settings: HealthSettings) -> Severity:
    if xid in settings.ignore_xids:
        return Severity.IGNORED
    return Severity.FATAL if xid in settings.fatal_xids else Severity.DRAIN


@dataclass(frozen=True, slots=True)
class Finding:
    """GPU `gpu` (NVML index) is sick. `gpu_instance`: only that MIG slice is."""

    gpu: int
    uuid: str
    reason: str  # e.g. "XID 79", "double-bit ECC error", "temperature 93 °C", "GPU is lost"
    severity: Severity
    sticky: bool = True  # stays until the service restarts; False: comes back by itself
    gpu_instance: int | None = None
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Recovered:
    gpu: int
    uuid: str
    reason: str


@dataclass
class GpuReading:
    """The last values read from one GPU, for `/metrics`."""

    index: int
    uuid: str
    model: str
    temperature: int | None = None
    ecc_uncorrected: int | None = None
    xids: dict[int, int] = field(default_factory=dict)  # XID → times seen
    lost: bool = False
    hot: bool = False


class _Judge:
    """What both pollers share: readings → findings, remembered per GPU."""

    def __init__(self, gpus: Iterable[Gpu], settings: HealthSettings) -> None:
        self.settings = settings
        self.readings = {g.index: GpuReading(g.index, g.uuid, g.model) for g in gpus if not g.lost}
        self.baseline: dict[int, int] = {}

    def temperature(self, gpu: int, celsius: int) -> list[Finding | Recovered]:
        reading = self.readings[gpu]
        reading.temperature = celsius
        settings = self.settings
        if not reading.hot and celsius >= settings.max_temperature:
            reading.hot = True
            why = f"temperature {celsius} °C (limit {settings.max_temperature} °C)"
            return [Finding(gpu, reading.uuid, why, Severity.DRAIN, sticky=False)]
        if reading.hot and celsius < settings.resume_temperature:
            reading.hot = False
            return [Recovered(gpu, reading.uuid, f"cooled to {celsius} °C")]
        return []

    def ecc(self, gpu: int, count: int) -> list[Finding | Recovered]:
        reading = self.readings[gpu]
        reading.ecc_uncorrected = count
        base = self.baseline.setdefault(gpu, count)
        if count > base:
            self.baseline[gpu] = count
            why = f"double-bit ECC error (uncorrected count {count})"
            return [Finding(gpu, reading.uuid, why, Severity.FATAL)]
        return []

    def lost(self, gpu: int) -> list[Finding | Recovered]:
        reading = self.readings[gpu]
        if reading.lost:
            return []
        reading.lost = True
        return [Finding(gpu, reading.uuid, "GPU is lost", Severity.FATAL)]

    def xid(self, gpu: int, xid: int, instance: int | None) -> list[Finding | Recovered]:
        reading = self.readings[gpu]
        reading.xids[xid] = reading.xids.get(xid, 0) + 1
        severity = xid_severity(xid, self.settings)
        if severity is Severity.IGNORED:
            return []
        if severity is Severity.FATAL:
            instance = None  # the whole GPU is gone, whichever slice noticed
        return [Finding(gpu, reading.uuid, f"XID {xid}", severity, True, instance, xid)]


class NvmlHealth:
    """Polls NVML without blocking: pending XID/ECC events, then each GPU's temperature and
    uncorrected ECC count. A GPU that answers "GPU is lost" is lost."""

    def __init__(self, nvml: Nvml, gpus: Sequence[Gpu], settings: HealthSettings) -> None:
        self.nvml = nvml
        self.judge = _Judge(gpus, settings)
        self.handles: dict[int, object] = {}
        self.events = nvml.nvmlEventSetCreate()
        self._pending: list[Finding | Recovered] = []
        for gpu in gpus:
            if gpu.lost:
                continue
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                self.handles[gpu.index] = handle
                nvml.nvmlDeviceRegisterEvents(handle, EVENT_XID | EVENT_DOUBLE_BIT_ECC, self.events)
            except NvmlError as error:
                if error_code(error) == ERROR_GPU_IS_LOST:
                    self._pending.extend(self.judge.lost(gpu.index))
                # Otherwise too old for events: temperature and ECC counters still work.
        # The counts before start are history: only a rise is an error.
        for index, handle in self.handles.items():
            count = self._ecc(index, handle)
            if count is not None:
                self.judge.baseline[index] = count

    @property
    def readings(self) -> dict[int, GpuReading]:
        return self.judge.readings

    def _index_of(self, handle: object) -> int | None:
        """Which GPU an event names. Events carry fresh handle objects: match by address,
        then by UUID (as the device plugin does)."""
        address = _address(handle)
        for index, known in self.handles.items():
            if known == handle or (address is not None and _address(known) == address):
                return index
        try:
            uuid = str(self.nvml.nvmlDeviceGetUUID(handle))
        except NvmlError:
            return None  # a GPU that cannot say who it is: the lost check below finds it
        return next((i for i, r in self.judge.readings.items() if r.uuid == uuid), None)

    def _ecc(self, index: int, handle: object) -> int | None:
        nvml = self.nvml
        try:
            return int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            )
        except NvmlError as error:
            if error_code(error) == ERROR_GPU_IS_LOST:
                self._pending.extend(self.judge.lost(index))
            return None  # ECC off or not supported on this GPU

    def poll(self) -> list[Finding | Recovered]:
        found, self._pending = self._pending, []
        judge = self.judge
        for _ in range(_MAX_EVENTS_PER_POLL):
            try:
                event = self.nvml.nvmlEventSetWait(self.events, 0)
            except NvmlError:
                break  # none pending (a timeout), or the set is unusable: counters still tell
            index = self._index_of(event.device)
            if index is None:
                continue
            if event.eventType == EVENT_XID:
                gi = int(event.gpuInstanceId)
                instance = None if gi == NO_INSTANCE else gi
                found.extend(judge.xid(index, int(event.eventData), instance))
        nvml = self.nvml
        for index, handle in self.handles.items():
            if judge.readings[index].lost:
                continue
            try:
                celsius = int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
            except NvmlError as error:
                if error_code(error) == ERROR_GPU_IS_LOST:
                    found.extend(judge.lost(index))
                continue
            found.extend(judge.temperature(index, celsius))
            count = self._ecc(index, handle)
            if count is not None:
                found.extend(judge.ecc(index, count))
        found.extend(self._pending)
        self._pending = []
        return found


def _address(handle: object) -> int | None:
    """The address a ctypes handle points to (pynvml's), None for anything else."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value  # type: ignore[arg-type]
    except (TypeError, ctypes.ArgumentError):
        return None


class SmiHealth:
    """The nvidia-smi fallback: temperature, uncorrected ECC and lost GPUs. It cannot see XID
    errors (the driver reports them to the kernel log and to NVML only)."""

    QUERY = (
        "--query-gpu=index,temperature.gpu,ecc.errors.uncorrected.volatile.total",
        "--format=csv,noheader,nounits",
    )

    def __init__(self, gpus: Sequence[Gpu], settings: HealthSettings, run: Runner = run_smi):
        self.judge = _Judge(gpus, settings)
        self.run = run
        self._started = False

    @property
    def readings(self) -> dict[int, GpuReading]:
        return self.judge.readings

    def poll(self) -> list[Finding | Recovered]:
        output = self.run(list(self.QUERY))
        if output is None:
            return []
        judge = self.judge
        seen: set[int] = set()
        found: list[Finding | Recovered] = []
        for line in output.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if not parts or not parts[0].isdigit() or int(parts[0]) not in judge.readings:
                continue
            index = int(parts[0])
            seen.add(index)
            if len(parts) > 1 and parts[1].isdigit():
                found.extend(judge.temperature(index, int(parts[1])))
            if len(parts) > 2 and parts[2].isdigit():
                if not self._started:
                    judge.baseline[index] = int(parts[2])
                found.extend(judge.ecc(index, int(parts[2])))
        for index in judge.readings:
            if index not in seen:
                found.extend(judge.lost(index))  # nvidia-smi no longer lists it
        self._started = True
        return found
