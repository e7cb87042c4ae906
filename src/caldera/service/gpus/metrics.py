"""GPU health on `/metrics`: caldera's counterparts of the seed's DCGM alerts.

| seed alert (DCGM)                         | caldera metric and rule                          |
|-------------------------------------------|--------------------------------------------------|
| GPUDeviceErrors: DCGM_FI_DEV_XID_ERRORS>0 | `increase(caldera_gpu_xid_errors_total[5m]) > 0` |
| GPUNotAvailable: DCGM_FI_DEV_COUNT == 0   | `caldera_gpus_available == 0`                    |
| GPUHighTemperature: DCGM_FI_DEV_GPU_TEMP  | `caldera_gpu_temperature_celsius > 85`           |

plus what only the scheduler knows: `caldera_gpu_drained` (1 per drained GPU, with why).

Every series a rule or the dashboard reads exists from the first scrape (Prometheus
practice: `increase()` cannot see a counter's first step from absent to 1): each GPU's
`caldera_gpu_drained` is 0 with an empty reason while it is healthy, and its
`caldera_gpu_xid_errors_total` is 0 for every fatal XID (`gpus.health.FATAL_XIDS`) until
one is seen. Another XID's series starts at its first count.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from caldera.service.gpus.health import FATAL_XIDS
from caldera.service.gpus.host import HostGPUs
from caldera.service.gpus.watch import GpuWatch

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["GPU_METRICS", "GpuCollector"]

GPU_METRICS = (
    "caldera_gpus",
    "caldera_gpus_available",
    "caldera_gpus_lost",
    "caldera_gpu_healthy",
    "caldera_gpu_drained",
    "caldera_gpu_xid_errors_total",
    "caldera_gpu_ecc_uncorrected_errors",
    "caldera_gpu_temperature_celsius",
)


class GpuCollector(Collector):
    """Reads the host's inventory and the health watch (under the runtime's lock)."""

    def __init__(self, host: HostGPUs, watch: GpuWatch | None, lock: threading.RLock) -> None:
        self.host = host
        self.watch = watch
        self.lock = lock

    def collect(self) -> Iterator[Metric]:
        host = self.host
        with self.lock:
            sick = dict(self.watch.sick) if self.watch is not None else {}
            readings = dict(self.watch.readings) if self.watch is not None else {}
            gpus = {g.index: g for g in host.inventory.gpus}
        physical = sorted({host.physical[d] for d in range(len(host.physical))} | set(readings))
        if host.source == "virtual":
            physical = list(range(host.count))
        drained: dict[int, tuple[str, str]] = {}
        for device, finding in sick.items():
            drained.setdefault(host.physical[device], (finding.reason, finding.severity.value))
        lost = {i for i, r in readings.items() if r.lost} | {g.index for g in host.inventory.lost}
        yield GaugeMetricFamily(
            "caldera_gpus", "GPUs this service found (whole or in MIG mode).", len(physical)
        )
        available = [i for i in physical if i not in drained and i not in lost]
        yield GaugeMetricFamily(
            "caldera_gpus_available",
            "GPUs neither drained nor lost (GPUNotAvailable: == 0).",
            len(available),
        )
        yield GaugeMetricFamily(
            "caldera_gpus_lost", "GPUs that fell off the bus or cannot be read.", len(lost)
        )
        healthy = GaugeMetricFamily(
            "caldera_gpu_healthy", "1 while the GPU takes work, 0 while drained.", labels=_LABELS
        )
        drain = GaugeMetricFamily(
            "caldera_gpu_drained",
            "1 for each drained GPU, with why.",
            labels=[*_LABELS, "reason", "verdict"],
        )
        xids = CounterMetricFamily(
            "caldera_gpu_xid_errors", "XID errors seen by NVML.", labels=[*_LABELS, "xid"]
        )
        ecc = GaugeMetricFamily(
            "caldera_gpu_ecc_uncorrected_errors",
            "Volatile uncorrected (double-bit) ECC errors.",
            labels=_LABELS,
        )
        temperature = GaugeMetricFamily(
            "caldera_gpu_temperature_celsius", "GPU core temperature.", labels=_LABELS
        )
        for index in physical:
            gpu = gpus.get(index)
            reading = readings.get(index)
            uuid = gpu.uuid if gpu else (reading.uuid if reading else str(index))
            model = gpu.model if gpu else host.node.gpu_model
            labels = [str(index), uuid, model]
            healthy.add_metric(labels, 0.0 if index in drained or index in lost else 1.0)
            if index in drained:
                drain.add_metric([*labels, *drained[index]], 1.0)
            else:
                drain.add_metric([*labels, "", ""], 0.0)
            seen = reading.xids if reading is not None else {}
            for xid in sorted(FATAL_XIDS | set(seen)):
                xids.add_metric([*labels, str(xid)], seen.get(xid, 0))
            if reading is None:
                continue
            if reading.ecc_uncorrected is not None:
                ecc.add_metric(labels, reading.ecc_uncorrected)
            if reading.temperature is not None:
                temperature.add_metric(labels, reading.temperature)
        yield healthy
        yield drain
        yield xids
        yield ecc
        yield temperature


_LABELS = ["gpu", "uuid", "model"]
