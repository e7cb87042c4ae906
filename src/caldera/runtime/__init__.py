"""The runtime kernel: what the simulator, the service and the Kubernetes controller share.

- `job`        `TrackedJob` (a job as a runtime tracks it, and its `JobView`), `refresh_index`
- `kernel`     `Kernel.apply(decisions)` and `Kernel.settle(job)` through `Effects`, the small
               protocol each runtime implements (make, launch, signal, stop tasks; persist;
               record)
- `lifecycle`  the pure "tasks ended → outcome" function
- `wire`       one wire format for job records (status fields, tasks' placements, nomination)
- `requests`   one request → `JobSpec` path (resources, the fractional-GPU rule, checks)
- `metrics`    the DESIGN §5 history metrics every runtime reports under the same names

It sits above the core and the configuration and below the runtimes, which import it and
never each other.
"""

from caldera.runtime.job import TrackedJob, TrackedTask, refresh_index
from caldera.runtime.kernel import (
    MAX_CYCLES_AT_ONCE,
    Effects,
    EventKind,
    Kernel,
    KernelStats,
    cancel_eviction,
    run_again,
)
from caldera.runtime.lifecycle import Ended, Outcome, TaskEnd, outcome

__all__ = [
    "MAX_CYCLES_AT_ONCE",
    "Effects",
    "Ended",
    "EventKind",
    "Kernel",
    "KernelStats",
    "Outcome",
    "TaskEnd",
    "TrackedJob",
    "TrackedTask",
    "cancel_eviction",
    "outcome",
    "refresh_index",
    "run_again",
]
