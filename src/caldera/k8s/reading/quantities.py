"""Kubernetes resource quantities ⇄ caldera's integer units (milli-GPUs, millicores, MiB).

Written quantities are the shortest exact form ("8", "500m", "256Gi", "1536Mi") so that a
rendered manifest reads like a hand-written one and renders the same every time.

Read quantities are whatever a tenant wrote: `parse_quantity` reads them as Kubernetes does
(`resource.ParseQuantity`: a JSON number, or a string with a binary-SI, decimal-SI or
exponent suffix) into an exact fraction, and refuses, with a one-line `ValueError`, what
Kubernetes refuses and what no cluster could hold: NaN, infinities, negative amounts, values
past `MAX_QUANTITY`. Everything else here reads through it: one rule in one place.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from caldera.model import GPU_MILLI, Resources

__all__ = [
    "MAX_QUANTITY",
    "cpu_millis",
    "cpu_quantity",
    "gpu_quantity",
    "memory_mib",
    "memory_quantity",
    "mig_resource",
    "parse_capacity_mib",
    "parse_count",
    "parse_gpu_quantity",
    "parse_quantity",
    "quantity_text",
    "resource_list",
    "resources_from_list",
    "whole_count",
]

# The largest amount read: Kubernetes keeps a quantity's milli-value in an int64, so
# anything past 2**63 / 1000 units (9.2e15 cores, 9.2 PB) is no amount a node can offer.
MAX_QUANTITY = Fraction(2**63 - 1, 1000)

# Kubernetes' grammar: <sign><digits>[.<digits>]<suffix>, the suffix a binary-SI one (Ki…Ei),
# a decimal-SI one (n u m "" k M G T P E) or a decimal exponent (e3, E-2).
_QUANTITY = re.compile(
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIX = {
    None: Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_MAX_EXPONENT = 30  # 1e30 is already past MAX_QUANTITY; a larger exponent is not computed
_MAX_TEXT = 64  # characters: a longer quantity is no quantity


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes quantity (4, 0.5, "500m", "64Gi", "1e3") as an exact amount of its unit.

    ValueError, one line, for anything Kubernetes would refuse (a bool, "4 cores", "") and
    for NaN, infinities, negative amounts and amounts past `MAX_QUANTITY`."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        amount = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid quantity {value!r}")
        amount = Fraction(value)
    elif isinstance(value, str):
        match = _QUANTITY.match(value) if len(value) <= _MAX_TEXT else None
        if not match:
            raise ValueError(f"invalid quantity {value[:_MAX_TEXT]!r}")
        sign, digits, exponent, suffix = match.groups()
        amount = Fraction(digits if not digits.endswith(".") else digits[:-1])
        if exponent is not None:
            power = int(exponent[1:])
            if power > _MAX_EXPONENT:
                raise ValueError(f"quantity {value!r} is out of range")
            amount *= Fraction(10) ** max(power, -_MAX_EXPONENT)
        else:
            amount *= _SUFFIX[suffix]
        if sign == "-":
            amount = -amount
    else:
        raise ValueError(f"invalid quantity of type {type(value).__name__}")
    if amount < 0:
        raise ValueError(f"negative quantity {value!r}")
    if amount > MAX_QUANTITY:
        raise ValueError(f"quantity {value!r} is out of range")
    return amount


def quantity_text(value: object) -> str:
    """A quantity as the string Kubernetes' wire form is (a tenant's unquoted `cpu: 4` or
    `0.5` becomes "4", "500m"; a string is kept as written). ValueError as `parse_quantity`."""
    if isinstance(value, str):
        parse_quantity(value)
        return value
    amount = parse_quantity(value)
    if amount.denominator == 1:
        return str(amount.numerator)
    for suffix, scale in (("m", 10**3), ("u", 10**6), ("n", 10**9)):
        scaled = amount * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{math.ceil(amount * 10**9)}n"  # finer than Kubernetes keeps: rounded up


def cpu_millis(value: object) -> int:
    """A CPU quantity in millicores, rounded up as Kubernetes rounds a request."""
    return math.ceil(parse_quantity(value) * 1000)


def memory_mib(value: object) -> int:
    """A memory request (bytes: 4, "512Mi", "1G") in MiB, rounded up: a request is never
    understated."""
    return math.ceil(parse_quantity(value) / 2**20)


def whole_count(value: object, what: str = "quantity") -> int:
    """A count of devices (an extended resource: "8", 2): Kubernetes takes only whole ones."""
    amount = parse_quantity(value)
    if amount.denominator != 1:
        raise ValueError(f"{what} {value!r} must be a whole number")
    return int(amount)


def gpu_quantity(milli: int) -> str:
    """Milli-GPUs as a quantity: whole devices as a plain count, a share as "500m"."""
    return str(milli // GPU_MILLI) if milli % GPU_MILLI == 0 else f"{milli}m"


def cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 and mib else f"{mib}Mi"


def parse_count(value: object) -> float:
    """A plain quantity ("8", "500m", 4) as a number; ValueError otherwise."""
    return float(parse_quantity(value))


def parse_capacity_mib(value: object) -> int:
    """A node's memory ("1056330584Ki") in whole MiB, rounded *down*: capacity is never
    overstated (requests round up, `memory_mib`)."""
    return math.floor(parse_quantity(value) / 2**20)


def parse_gpu_quantity(value: object) -> int:
    """A GPU quantity ("8", "500m") as milli-GPUs."""
    return round(parse_quantity(value) * GPU_MILLI)


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
        cpu=cpu_millis(values["cpu"]) if "cpu" in values else 0,
        memory=memory_mib(values["memory"]) if "memory" in values else 0,
    )


def mig_resource(profile: str, gpu_resource: str) -> str:
    """The device plugin's resource for one MIG slice of `profile` (the `mixed` strategy):
    nvidia.com/gpu → nvidia.com/mig-1g.10gb."""
    return f"{gpu_resource.rsplit('/', 1)[0]}/mig-{profile}"
