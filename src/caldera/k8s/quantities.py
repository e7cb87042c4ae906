"""Kubernetes resource quantities ⇄ caldera's integer units (milli-GPUs, millicores, MiB).

Written quantities are the shortest exact form ("8", "500m", "256Gi", "1536Mi") so that a
rendered manifest reads like a hand-written one and renders the same every time.
"""

from __future__ import annotations

import math
import re

from caldera.model import GPU_MILLI, Resources, parse_cpu, parse_memory_mib

__all__ = [
    "cpu_quantity",
    "gpu_quantity",
    "memory_quantity",
    "parse_capacity_mib",
    "parse_count",
    "parse_gpu_quantity",
    "resource_list",
    "resources_from_list",
]

_DECIMAL = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(m|k|M|G)?\s*$")
_SCALE = {None: 1.0, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9}


def gpu_quantity(milli: int) -> str:
    """Milli-GPUs as a quantity: whole devices as a plain count, a share as "500m"."""
    return str(milli // GPU_MILLI) if milli % GPU_MILLI == 0 else f"{milli}m"


def cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 and mib else f"{mib}Mi"


def parse_count(value: object) -> float:
    """A plain decimal quantity ("8", "500m", 4) as a number; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _DECIMAL.match(str(value))
        if not match:
            raise ValueError(f"invalid quantity {value!r}")
        number = float(match.group(1)) * _SCALE[match.group(2)]
    if number < 0 or not math.isfinite(number):
        raise ValueError(f"invalid quantity {value!r}")
    return number


_BYTES = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]i?|k|m)?\s*$")
_BYTE_SCALE = {
    None: 1,
    "m": 0.001,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_capacity_mib(value: object) -> int:
    """A node's memory ("1056330584Ki") in whole MiB, rounded *down*: capacity is never
    overstated (requests round up, `caldera.model.parse_memory_mib`)."""
    match = _BYTES.match(str(value))
    if not match:
        raise ValueError(f"invalid memory quantity {value!r}")
    return int(float(match.group(1)) * _BYTE_SCALE[match.group(2)]) // 2**20


def parse_gpu_quantity(value: object) -> int:
    """A GPU quantity ("8", "500m") as milli-GPUs."""
    return round(parse_count(value) * GPU_MILLI)


def resource_list(resources: Resources, gpu_resource: str) -> dict[str, str]:
    """A caldera quota as a Kubernetes ResourceList; zero dimensions mean unset and are left
    out (a Volcano queue reads a missing dimension as unlimited, caldera reads zero so)."""
    out: dict[str, str] = {}
    if resources.cpu:
        out["cpu"] = cpu_quantity(resources.cpu)
    if resources.memory:
        out["memory"] = memory_quantity(resources.memory)
    if resources.gpu:
        out[gpu_resource] = gpu_quantity(resources.gpu)
    return out


def resources_from_list(values: dict[str, object], gpu_resource: str) -> Resources:
    """The inverse of `resource_list` (unknown resources are ignored)."""
    return Resources(
        gpu=parse_gpu_quantity(values[gpu_resource]) if gpu_resource in values else 0,
        cpu=parse_cpu(str(values["cpu"])) if "cpu" in values else 0,
        memory=parse_memory_mib(str(values["memory"])) if "memory" in values else 0,
    )
