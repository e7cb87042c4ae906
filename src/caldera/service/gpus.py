"""This host's GPUs: detected through nvidia-smi, or declared (`--gpus N` virtual devices).

The service runs one node. Detection asks `nvidia-smi` for each device's index, model and
memory; with no driver (or `--gpus N`) the node has N virtual devices named `virtual`, which
is how tests and GPU-less hosts run real processes under the real cycle.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass

from caldera.model import Node

__all__ = ["DetectedGPUs", "detect_gpus", "local_node"]


@dataclass(frozen=True, slots=True)
class DetectedGPUs:
    count: int
    model: str
    memory_mib: int
    source: str  # "nvidia-smi" | "virtual" | "none"


def detect_gpus() -> DetectedGPUs:
    """Ask nvidia-smi; no tool or no device gives zero GPUs (a CPU-only node)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return DetectedGPUs(0, "none", 0, "none")
    try:
        result = subprocess.run(
            [tool, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return DetectedGPUs(0, "none", 0, "none")
    rows = [
        [part.strip() for part in line.split(",")]
        for line in result.stdout.splitlines()
        if line.strip()
    ]
    rows = [row for row in rows if len(row) >= 3]
    if result.returncode != 0 or not rows:
        return DetectedGPUs(0, "none", 0, "none")
    # Names like "NVIDIA H100 80GB HBM3": the model is the word after the vendor.
    words = rows[0][1].replace("NVIDIA", "").split()
    model = words[0] if words else "GPU"
    try:
        memory = int(float(rows[0][2]))
    except ValueError:
        memory = 0
    return DetectedGPUs(len(rows), model, memory, "nvidia-smi")


def local_node(gpus: int | None) -> tuple[Node, DetectedGPUs]:
    """The one node this service schedules: `gpus` virtual devices, or the detected ones."""
    virtual = DetectedGPUs(gpus, "virtual", 0, "virtual") if gpus is not None else None
    detected = virtual or detect_gpus()
    cpus = os.cpu_count() or 1
    node = Node(
        index=0,
        name=socket.gethostname() or "localhost",
        gpus=detected.count,
        gpu_model=detected.model,
        cpu=cpus * 1000,
        memory=_memory_mib(),
        island_size=detected.count or 1,
        tier1=0,
        tier2=0,
        gpu_memory=detected.memory_mib,
    )
    return node, detected


def _memory_mib() -> int:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
        return int(pages * size // (1024 * 1024))
    except (ValueError, OSError, AttributeError):
        return 1024 * 1024
