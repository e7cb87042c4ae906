"""GPU health as the runtime sees it: which of the node's devices are drained, and why.

`GpuWatch` polls a health source (`NvmlHealth`, or `SmiHealth` under the nvidia-smi
fallback) every `interval` seconds and turns findings about physical GPUs into drains of the
node's devices (a whole GPU, or every MIG slice of it — one slice only when an XID names its
instance). A drained device is kept out of the free-room index the way Kubernetes keeps a
cordoned node: before each cycle `hold()` takes whatever is free on it, so the core never
places new work there, and gives it back when the device recovers. Which jobs must leave is
`tasks_on()`; the runtime signals them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from caldera.core import Room, TaskPlacement
from caldera.service.gpus.health import (
    APPLICATION_XIDS,
    FATAL_XIDS,
    Finding,
    GpuReading,
    HealthSettings,
    NvmlHealth,
    Recovered,
    Severity,
    SmiHealth,
)
from caldera.service.gpus.host import HostGPUs

__all__ = ["Drain", "GpuHealthModel", "GpuWatch", "HealthSource", "health_settings"]


class HealthSource(Protocol):
    @property
    def readings(self) -> dict[int, GpuReading]: ...

    def poll(self) -> list[Finding | Recovered]: ...


class GpuHealthModel(BaseModel):
    """The `gpu_health:` section of the service's configuration."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    interval: float = Field(default=10.0, gt=0, le=3600)
    max_temperature: int = Field(default=90, ge=30, le=150)
    resume_temperature: int = Field(default=80, ge=0, le=150)
    ignore_xids: list[int] = Field(default_factory=lambda: sorted(APPLICATION_XIDS))
    fatal_xids: list[int] = Field(default_factory=lambda: sorted(FATAL_XIDS))

    @model_validator(mode="after")
    def _cooler(self) -> GpuHealthModel:
        if self.resume_temperature >= self.max_temperature:
            raise ValueError("resume_temperature must be below max_temperature")
        return self


def health_settings(model: GpuHealthModel) -> HealthSettings | None:
    if not model.enabled:
        return None
    return HealthSettings(
        model.interval,
        model.max_temperature,
        model.resume_temperature,
        frozenset(model.ignore_xids),
        frozenset(model.fatal_xids),
    )


@dataclass(frozen=True, slots=True)
class Drain:
    """Devices of the node that take no new work because of `finding`."""

    devices: tuple[int, ...]
    finding: Finding

    @property
    def fatal(self) -> bool:
        return self.finding.severity is Severity.FATAL


class GpuWatch:
    """The node's drained devices, fed by a health source."""

    def __init__(self, host: HostGPUs, source: HealthSource, interval: float) -> None:
        self.host = host
        self.source = source
        self.interval = interval
        self.sick: dict[int, Finding] = {}  # node device → why it is drained
        self.held: dict[int, int] = {}  # node device → milli-GPUs taken to keep it drained
        self._next = 0.0

    @classmethod
    def for_host(cls, host: HostGPUs, settings: HealthSettings | None) -> GpuWatch | None:
        """NVML when discovery used it, else nvidia-smi; none for virtual GPUs."""
        if settings is None or host.source in ("virtual", "none"):
            return None
        gpus = host.inventory.gpus
        source: HealthSource
        if host.nvml is not None:
            source = NvmlHealth(host.nvml, gpus, settings)
        else:
            source = SmiHealth(gpus, settings)
        return cls(host, source, settings.interval)

    @property
    def readings(self) -> dict[int, GpuReading]:
        return self.source.readings

    def due(self, now: float) -> bool:
        return now >= self._next

    def read(self, now: float) -> list[Finding | Recovered] | None:
        """Ask the GPUs, when due (None when not): I/O — NVML calls, or an nvidia-smi run —
        so the runtime calls it without holding its lock."""
        if not self.due(now):
            return None
        self._next = now + self.interval
        return self.source.poll()

    def poll(self, now: float) -> tuple[list[Drain], list[tuple[int, ...]]]:
        """`read` then `apply`: new drains and the devices that came back."""
        return self.apply(self.read(now) or [])

    def apply(
        self, changes: list[Finding | Recovered]
    ) -> tuple[list[Drain], list[tuple[int, ...]]]:
        """New drains and the devices that came back, from what `read` found."""
        drains: list[Drain] = []
        restored: list[tuple[int, ...]] = []
        for change in changes:
            devices = self._devices(change)
            if isinstance(change, Recovered):
                back = tuple(d for d in devices if d in self.sick and not self.sick[d].sticky)
                for device in back:
                    del self.sick[device]
                if back:
                    restored.append(back)
                continue
            fresh = tuple(d for d in devices if self._worse(d, change))
            for device in fresh:
                self.sick[device] = change
            if fresh:
                drains.append(Drain(fresh, change))
        return drains, restored

    def _worse(self, device: int, finding: Finding) -> bool:
        known = self.sick.get(device)
        if known is None:
            return True
        rank = {Severity.DRAIN: 1, Severity.FATAL: 2}
        return finding.sticky and (
            not known.sticky or rank[finding.severity] > rank[known.severity]
        )

    def _devices(self, change: Finding | Recovered) -> tuple[int, ...]:
        devices = self.host.devices_of(change.gpu)
        instance = change.gpu_instance if isinstance(change, Finding) else None
        if instance is None:
            return devices
        return tuple(d for d in devices if self.host.instance_of(d) == instance) or devices

    # -- the room --------------------------------------------------------------------------

    def hold(self, room: Room) -> None:
        """Take whatever is free on drained devices, so no cycle places work there."""
        node = self.host.node.index
        for device in self.sick:
            free = room.free[node][device]
            if free > 0:
                room.take(TaskPlacement(node, (device,), free))
                self.held[device] = self.held.get(device, 0) + free

    def release(self, room: Room, devices: Iterable[int]) -> None:
        """Give back what `hold` took on devices that recovered."""
        node = self.host.node.index
        for device in devices:
            held = self.held.pop(device, 0)
            if held:
                room.give(TaskPlacement(node, (device,), held))

    def reasons(self) -> dict[int, str]:
        """Why each drained device is drained, for people."""
        return {d: f"{f.reason} ({f.severity.value})" for d, f in self.sick.items()}

    @property
    def held_milli(self) -> int:
        return sum(self.held.values())

    @staticmethod
    def tasks_on(placements: Sequence[TaskPlacement], devices: Iterable[int]) -> list[int]:
        """Indexes of the placements that use any of `devices`."""
        wanted = set(devices)
        return [i for i, p in enumerate(placements) if wanted.intersection(p.devices)]
