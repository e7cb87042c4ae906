"""The fallback when NVML cannot be loaded but `nvidia-smi` runs: the same inventory, parsed
from three of its reports.

- `--query-gpu=index,uuid,name,memory.total,mig.mode.current`: the devices;
- `-L`: each GPU's MIG devices with their profile and `MIG-…` UUID;
- `topo -m`: the connection matrix; `NV<n>` cells are NVLink, `PIX`/`PXB` one PCIe switch.

`run` is the seam (argv → stdout, None when the tool fails); tests hand in recorded outputs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable

from caldera.service.gpus.inventory import Gpu, Inventory, MigSlice, islands_from_links

__all__ = ["QUERY", "Runner", "discover_smi", "run_smi"]

Runner = Callable[[list[str]], str | None]
QUERY = [
    "--query-gpu=index,uuid,name,memory.total,mig.mode.current",
    "--format=csv,noheader,nounits",
]
_GPU_LINE = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[^)]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")


def run_smi(argv: list[str]) -> str | None:
    """Run nvidia-smi; its stdout, or None when it is missing, fails or hangs."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, *argv], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    # A lost GPU makes nvidia-smi exit non-zero while it still reports the others.
    return done.stdout if done.stdout.strip() else None


def discover_smi(run: Runner = run_smi) -> Inventory | None:
    """The inventory nvidia-smi reports, or None when it reports nothing."""
    listing = run(QUERY)
    if listing is None:
        return None
    gpus: list[Gpu] = []
    for line in listing.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if "GPU is lost" in line or "Unable to determine" in line:
            gpus.append(Gpu(-1 - len(gpus), "", "", lost="GPU is lost"))
            continue
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            memory = int(float(parts[3]))
        except ValueError:
            memory = 0
        mig = len(parts) > 4 and parts[4].lower() == "enabled"
        gpus.append(Gpu(int(parts[0]), parts[1], parts[2], memory, mig))
    if not any(g.uuid for g in gpus):
        return None
    if any(g.mig for g in gpus):
        slices = _mig_devices(run(["-L"]) or "")
        gpus = [
            Gpu(g.index, g.uuid, g.name, g.memory_mib, g.mig, slices.get(g.index, ()), g.lost)
            if g.mig
            else g
            for g in gpus
        ]
    whole = [g.index for g in gpus if g.whole]
    nvlink, pcie = _links(run(["topo", "-m"]) or "")
    if nvlink:
        return Inventory(tuple(gpus), islands_from_links(whole, nvlink), "nvidia-smi", "", "nvlink")
    links = "pcie" if pcie else ""
    return Inventory(tuple(gpus), islands_from_links(whole, pcie), "nvidia-smi", "", links)


def _mig_devices(listing: str) -> dict[int, tuple[MigSlice, ...]]:
    found: dict[int, list[MigSlice]] = {}
    current: int | None = None
    for line in listing.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu:
            current = int(gpu.group(1))
            continue
        mig = _MIG_LINE.match(line)
        if mig and current is not None:
            found.setdefault(current, []).append(MigSlice(mig.group(3), mig.group(1)))
    return {gpu: tuple(slices) for gpu, slices in found.items()}


def _links(matrix: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """NVLink pairs and same-PCIe-switch pairs from `nvidia-smi topo -m`."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in matrix.splitlines()]
    # The header row comes first and starts with the column names GPU0 GPU1 …
    header = next((line.split() for line in lines if line.split()[:1] == ["GPU0"]), [])
    columns = [int(word[3:]) for word in header if re.fullmatch(r"GPU\d+", word)]
    nvlink: list[tuple[int, int]] = []
    pcie: list[tuple[int, int]] = []
    for line in lines:
        words = line.split()
        if not words or not re.fullmatch(r"GPU\d+", words[0]) or words == header:
            continue
        row = int(words[0][3:])
        for column, cell in zip(columns, words[1 : 1 + len(columns)], strict=False):
            if column <= row:
                continue
            if cell.startswith("NV"):
                nvlink.append((row, column))
            elif cell in ("PIX", "PXB"):
                pcie.append((row, column))
    return nvlink, pcie
