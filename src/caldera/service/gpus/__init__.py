"""This host's GPUs as they really are: discovery, the node the service schedules, health.

- `nvml`: the one seam to NVIDIA's management library; `fake`: a fake NVML beside it, with
  shapes from real machines;
- `inventory`: every device by UUID, MIG mode and instances, NVLink (or PCIe) islands;
- `smi`: the same inventory from `nvidia-smi` when NVML cannot be loaded;
- `host`: the node for the service, and the UUID behind each of its devices
  (`CUDA_VISIBLE_DEVICES`);
- `health`: XID errors, double-bit ECC errors, temperature and lost devices → drains.
"""

from caldera.service.gpus.fake import SHAPES, FakeNvml
from caldera.service.gpus.host import HostGPUs, detect, host_gpus, local_node, virtual_gpus
from caldera.service.gpus.inventory import Gpu, Inventory, MigSlice, discover, gpu_model

__all__ = [
    "SHAPES",
    "FakeNvml",
    "Gpu",
    "HostGPUs",
    "Inventory",
    "MigSlice",
    "detect",
    "discover",
    "gpu_model",
    "host_gpus",
    "local_node",
    "virtual_gpus",
]
