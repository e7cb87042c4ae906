"""MIG slices: profiles, and what a slice counts for.

A GPU in MIG mode (A100, H100, H200, …) is split into instances of fixed profiles named
`<compute>g.<memory>gb` (`1g.10gb`, `2g.20gb`, `3g.40gb`, `7g.80gb`; H100 also `1g.20gb`
and media-extension variants like `1g.10gb+me`; a compute-instance profile reads
`1c.3g.40gb`). With the device plugin's `mixed` strategy each profile is its own resource
(`nvidia.com/mig-1g.10gb`) and a job asks for one slice of a profile per task.

**GPU-equivalent.** Quotas, deserved shares, the eviction budget and the metrics count GPUs,
so a slice counts as the share of its GPU's compute it gets: `g` of the 7 compute slices,
in milli-GPUs rounded down — 1g = 142, 2g = 285, 3g = 428, 4g = 571, 7g = 1000. A fully
sliced GPU therefore counts as at most one GPU (7 × 1g = 994), never more. Memory does not
enter: a `1g.20gb` counts like a `1g.10gb`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from caldera.model.resources import GPU_MILLI

__all__ = ["COMPUTE_SLICES", "MigProfile", "layout_problem", "parse_profile", "slice_milli"]

COMPUTE_SLICES = 7
"""Compute slices of a whole GPU in MIG mode (A100, H100, H200)."""

_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(\+me)?$")


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str
    compute: int  # compute slices (of 7): what the GPU-equivalent counts
    memory_gb: int

    @property
    def milli(self) -> int:
        return self.compute * GPU_MILLI // COMPUTE_SLICES


def parse_profile(name: str) -> MigProfile:
    """`1g.10gb` → 1 compute slice, 10 GB. ValueError with a one-line reason otherwise."""
    match = _PROFILE.match(name.strip())
    if match is None:
        raise ValueError(f"invalid MIG profile {name!r} (use e.g. 1g.10gb, 3g.40gb)")
    instance, gpu_slices, memory, _ = match.groups()
    compute = int(instance) if instance is not None else int(gpu_slices)
    if not 1 <= compute <= COMPUTE_SLICES or int(gpu_slices) > COMPUTE_SLICES:
        raise ValueError(f"invalid MIG profile {name!r}: at most {COMPUTE_SLICES} slices")
    if instance is not None and int(instance) > int(gpu_slices):
        raise ValueError(f"invalid MIG profile {name!r}: more compute than its GPU instance")
    return MigProfile(name.strip(), compute, int(memory))


def slice_milli(profile: str) -> int:
    """The GPU-equivalent of one slice of `profile`, in milli-GPUs (see the module doc)."""
    return parse_profile(profile).milli


def layout_problem(profiles: Iterable[str], gpu_memory_gb: int = 0) -> str | None:
    """Why one GPU cannot hold these slices at once, or None. Compute slices add up to at most
    7; memory (when the GPU's is known) to at most the GPU's."""
    parsed = [parse_profile(p) for p in profiles]
    compute = sum(p.compute for p in parsed)
    if compute > COMPUTE_SLICES:
        names = ", ".join(p.name for p in parsed)
        return f"MIG slices {names} need {compute} compute slices; a GPU has {COMPUTE_SLICES}"
    memory = sum(p.memory_gb for p in parsed)
    if gpu_memory_gb and memory > gpu_memory_gb:
        return f"MIG slices need {memory} GB; the GPU has {gpu_memory_gb} GB"
    return None
