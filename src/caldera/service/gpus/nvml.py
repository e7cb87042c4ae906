"""The one seam to NVIDIA's management library (NVML), through `pynvml` (`nvidia-ml-py`).

`Nvml` names the few NVML calls caldera makes, with pynvml's own names and meanings, so the
real module and the fake beside it (`caldera.service.gpus.fake.FakeNvml`) are used by the
same code: discovery and health polling are tested against the fake and run unchanged
against the driver. Errors are pynvml's `NVMLError` subclasses in both (the fake raises the
real classes), so code tells a lost GPU (`NVML_ERROR_GPU_IS_LOST`) from an unsupported query
the same way everywhere.

`load_nvml()` gives the real library, or None when the driver's `libnvidia-ml.so` is absent
(a host without NVIDIA GPUs): discovery then falls back to `nvidia-smi`.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import pynvml

__all__ = [
    "ERROR_GPU_IS_LOST",
    "ERROR_NOT_FOUND",
    "ERROR_NOT_SUPPORTED",
    "ERROR_TIMEOUT",
    "EVENT_DOUBLE_BIT_ECC",
    "EVENT_XID",
    "NO_INSTANCE",
    "Nvml",
    "NvmlError",
    "error_code",
    "load_nvml",
]

NvmlError = pynvml.NVMLError
ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
ERROR_TIMEOUT: int = pynvml.NVML_ERROR_TIMEOUT
ERROR_GPU_IS_LOST: int = pynvml.NVML_ERROR_GPU_IS_LOST
EVENT_XID: int = pynvml.nvmlEventTypeXidCriticalError
EVENT_DOUBLE_BIT_ECC: int = pynvml.nvmlEventTypeDoubleBitEccError
NO_INSTANCE = 0xFFFFFFFF
"""An event's GPU/compute instance id when it concerns the whole GPU, not one MIG slice."""


class Nvml(Protocol):
    """The NVML calls caldera uses (pynvml's names). Handles are opaque."""

    NVML_P2P_CAPS_INDEX_NVLINK: int
    NVML_P2P_STATUS_OK: int
    NVML_TEMPERATURE_GPU: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int
    NVML_DEVICE_MIG_ENABLE: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # .total in bytes
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]: ...  # [current, pending]
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int: ...
    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int: ...
    def nvmlDeviceGetP2PStatus(self, first: Any, second: Any, index: int) -> int: ...
    def nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, events: int, event_set: Any) -> None: ...
    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...


def error_code(error: BaseException) -> int | None:
    """The NVML return code carried by an `NVMLError`, None for any other exception."""
    return int(error.value) if isinstance(error, NvmlError) else None


def load_nvml() -> Nvml | None:
    """The real library, initialised; None when there is no NVIDIA driver on this host."""
    try:
        pynvml.nvmlInit()
    except (NvmlError, OSError):
        return None
    return cast(Nvml, pynvml)
