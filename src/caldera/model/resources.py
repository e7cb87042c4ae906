"""Resource quantities in integer units, so sums and comparisons are exact.

GPUs are counted in thousandths ("milli"): 1000 is one whole device, 500 half of one shared
device. CPU is in millicores and memory in MiB, as Kubernetes and the OpenB trace count them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["GPU_MILLI", "Resources", "parse_cpu", "parse_gpu_milli", "parse_memory_mib"]

GPU_MILLI = 1000
"""One whole GPU in milli-GPUs."""

_MEMORY_UNITS = {
    "": 1 / (1024 * 1024),
    "k": 1000 / (1024 * 1024),
    "K": 1000 / (1024 * 1024),
    "Ki": 1 / 1024,
    "M": 1000**2 / 1024**2,
    "Mi": 1,
    "G": 1000**3 / 1024**2,
    "Gi": 1024,
    "T": 1000**4 / 1024**2,
    "Ti": 1024 * 1024,
}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_memory_mib(value: str | int | float) -> int:
    """Parse a Kubernetes-style memory quantity ("2048Gi", "512Mi", "1T") into MiB.

    A bare number is taken as MiB when it is an int or float (the scenario format's habit),
    and as bytes only when written as a string with no unit, like Kubernetes does.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid memory quantity {value!r}")
    if isinstance(value, int | float):
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"invalid memory quantity {value!r}")
        return math.ceil(value)
    match = _QUANTITY.match(value)
    if not match or match.group(2) not in _MEMORY_UNITS:
        raise ValueError(f"invalid memory quantity {value!r} (use e.g. 512Mi, 64Gi, 2Ti)")
    return math.ceil(float(match.group(1)) * _MEMORY_UNITS[match.group(2)])


def parse_cpu(value: str | int | float) -> int:
    """Parse a CPU quantity ("500m", 4, "2.5") into millicores."""
    if isinstance(value, bool):
        raise ValueError(f"invalid cpu quantity {value!r}")
    if isinstance(value, int | float):
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"invalid cpu quantity {value!r}")
        return round(value * 1000)
    text = value.strip()
    if text.endswith("m"):
        number = text[:-1]
        scale = 1.0
    else:
        number = text
        scale = 1000.0
    try:
        parsed = float(number)
    except ValueError:
        raise ValueError(f"invalid cpu quantity {value!r} (use e.g. 4 or 500m)") from None
    if parsed < 0 or not math.isfinite(parsed):
        raise ValueError(f"invalid cpu quantity {value!r}")
    return round(parsed * scale)


def parse_gpu_milli(value: int | float) -> int:
    """Turn a GPU count (1, 8, 0.5) into milli-GPUs; fractions must be below one device."""
    if isinstance(value, bool) or value < 0 or not math.isfinite(value):
        raise ValueError(f"invalid GPU count {value!r}")
    milli = round(value * 1000)
    if milli > 1000 and milli % 1000:
        raise ValueError(f"invalid GPU count {value!r}: fractions are allowed only below 1 GPU")
    return milli


@dataclass(frozen=True, slots=True)
class Resources:
    """A vector of resources: milli-GPUs, millicores, MiB."""

    gpu: int = 0
    cpu: int = 0
    memory: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpu + other.gpu, self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpu - other.gpu, self.cpu - other.cpu, self.memory - other.memory)

    def scaled(self, factor: int) -> Resources:
        return Resources(self.gpu * factor, self.cpu * factor, self.memory * factor)

    def fits_in(self, limit: Resources | None) -> bool:
        """True when every dimension is within `limit`; a zero limit dimension means unset."""
        if limit is None:
            return True
        return (
            (limit.gpu <= 0 or self.gpu <= limit.gpu)
            and (limit.cpu <= 0 or self.cpu <= limit.cpu)
            and (limit.memory <= 0 or self.memory <= limit.memory)
        )

    @property
    def gpus(self) -> float:
        """GPUs as a (possibly fractional) count."""
        return self.gpu / 1000
