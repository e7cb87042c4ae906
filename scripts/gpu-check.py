"""What caldera sees of this host's NVIDIA GPUs, through the real driver (docs/gpus.md).

    PYTHONPATH=src python scripts/gpu-check.py      # needs only nvidia-ml-py beside caldera

Prints, as JSON lines: the inventory from NVML and from `nvidia-smi` (they must agree), the
node the local service would schedule, one health poll (temperature, ECC, pending XID
events), and what CUDA shows a child process started the way the service starts a job's
process (`CUDA_VISIBLE_DEVICES` set to one GPU's UUID, as `caldera.service.gpus.host`
maps it): exactly that GPU, and none with an unknown UUID. It changes nothing on the GPUs.
Exits non-zero when a check disagrees.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from dataclasses import asdict
from typing import Any

from caldera.service.gpus import detect, host_gpus
from caldera.service.gpus.health import HealthSettings, NvmlHealth
from caldera.service.gpus.smi import discover_smi

_CUDA_PROBE = """
import ctypes, json
cuda = ctypes.CDLL("libcuda.so.1")
seen = {"init": cuda.cuInit(0), "uuids": []}
count = ctypes.c_int(0)
seen["count_rc"] = cuda.cuDeviceGetCount(ctypes.byref(count))
for ordinal in range(count.value):
    device, uuid = ctypes.c_int(0), (ctypes.c_ubyte * 16)()
    cuda.cuDeviceGet(ctypes.byref(device), ordinal)
    cuda.cuDeviceGetUuid(uuid, device)
    raw = bytes(uuid).hex()
    seen["uuids"].append(f"GPU-{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}")
print(json.dumps(seen))
"""


def _say(what: str, value: Any) -> None:
    print(json.dumps({what: value}, default=str), flush=True)


def _cuda_sees(visible: str) -> dict[str, Any]:
    """What CUDA lists in a child process whose CUDA_VISIBLE_DEVICES is `visible`."""
    done = subprocess.run(
        [sys.executable, "-c", _CUDA_PROBE],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": visible},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def main() -> int:
    failures: list[str] = []
    inventory, nvml = detect()
    _say("nvml", asdict(inventory))
    smi = discover_smi()
    _say("nvidia-smi", asdict(smi) if smi is not None else None)
    if nvml is None:
        failures.append("NVML could not be loaded")
    if smi is None:
        failures.append("nvidia-smi reported nothing")
    elif [g.uuid for g in smi.gpus] != [g.uuid for g in inventory.gpus]:
        failures.append("NVML and nvidia-smi list different GPUs")
    host = host_gpus(inventory, nvml)
    _say("node", asdict(host.node))
    _say("ids", list(host.ids))  # each node device's CUDA_VISIBLE_DEVICES
    if nvml is not None:
        health = NvmlHealth(nvml, inventory.gpus, HealthSettings())
        _say("health", [asdict(f) for f in health.poll()])
        _say("readings", {i: asdict(r) for i, r in health.readings.items()})
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        failures.append("no libcuda.so.1: the CUDA check cannot run")
    else:
        for device in range(host.count):
            uuid = host.visible([device])  # what the service sets for a job on that device
            seen = _cuda_sees(uuid)
            _say(f"cuda with CUDA_VISIBLE_DEVICES={uuid}", seen)
            if seen.get("uuids") != [uuid]:
                failures.append(f"CUDA did not show exactly {uuid}")
        bogus = "GPU-00000000-0000-0000-0000-000000000000"
        seen = _cuda_sees(bogus)
        _say("cuda with an unknown UUID", seen)
        if seen.get("uuids"):
            failures.append("an unknown UUID still showed a GPU")
    _say("failures", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
