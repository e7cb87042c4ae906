"""The runtime kernel: what the simulator, the service and the Kubernetes controller share.

- `job`        `TrackedJob` (a job as a runtime tracks it, and its `JobView`), `refresh_index`
- `kernel`     `Kernel.apply(decisions)` and `Kernel.settle(job)` through `Effects`
- `effects`    `Effects`, the small protocol each runtime implements (make, launch, signal,
               stop tasks; persist; record), and the `EventKind`s it records
- `loop`       `SchedulerLoop`: the one scheduling loop (repeat until quiet, the timer and
               wake-ups) every runtime drives with its clock, snapshot and apply
- `lifecycle`  the pure "tasks ended → outcome" function
- `wire`       one wire format for job records (status fields, tasks' placements, nomination)
- `requests`   the request → `JobSpec` path of scenario jobs and REST submissions
- `metrics`    the DESIGN §5 history metrics every runtime reports under the same names

It sits above the core and the configuration and below the runtimes, which import it and
never each other.
"""

from caldera.runtime.effects import Effects, EventKind
from caldera.runtime.job import TrackedJob, TrackedTask, refresh_index
from caldera.runtime.kernel import Kernel, KernelStats, cancel_eviction
from caldera.runtime.lifecycle import Ended, Outcome, TaskEnd, outcome
from caldera.runtime.loop import MAX_CYCLES_AT_ONCE, TIMER, SchedulerLoop, run_again

__all__ = [
    "MAX_CYCLES_AT_ONCE",
    "TIMER",
    "Effects",
    "Ended",
    "EventKind",
    "Kernel",
    "KernelStats",
    "Outcome",
    "SchedulerLoop",
    "TaskEnd",
    "TrackedJob",
    "TrackedTask",
    "cancel_eviction",
    "outcome",
    "refresh_index",
    "run_again",
]
