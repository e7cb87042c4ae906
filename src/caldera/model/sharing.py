"""Time-sharing: N tasks on one GPU, taking turns, with no memory isolation (seed 004: the
development queues time-share; MIG is for production inference, whole GPUs for training).

A queue with `time_sharing: N` turns a job that asks for **one whole GPU for its one task**
into one of N tasks sharing a GPU: the scheduler counts it as 1/N of a GPU (placement, quotas,
metrics), binpacks such tasks onto partly used devices, and the task sees the whole device
(its memory too — nothing stops it from taking all of it). Never for training gangs: a job
with more than one task, a task with more than one GPU, a `large-job` and a job that already
asks for a fraction keep what they asked for.
"""

from __future__ import annotations

from dataclasses import replace

from caldera.model.jobs import JobSpec
from caldera.model.jobtypes import JobType
from caldera.model.queues import Queue
from caldera.model.resources import GPU_MILLI

__all__ = ["MAX_TIME_SHARING", "shares_time", "time_share"]

MAX_TIME_SHARING = 64


def shares_time(spec: JobSpec, queue: Queue | None) -> bool:
    """Would this job time-share a GPU in this queue?"""
    return (
        queue is not None
        and queue.time_sharing >= 2
        and spec.tasks == 1
        and spec.gpu == GPU_MILLI
        and spec.gpu_profile is None
        and spec.type is not JobType.LARGE
        and not spec.time_shared
    )


def time_share(spec: JobSpec, queue: Queue | None) -> JobSpec:
    """The job as its queue runs it: 1/N of a GPU when the queue time-shares N ways."""
    if queue is None or not shares_time(spec, queue):
        return spec
    ways = queue.time_sharing
    return replace(spec, gpu=GPU_MILLI // ways, time_shared=ways)
