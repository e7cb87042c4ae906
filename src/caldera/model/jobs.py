"""What a job asks for: a gang of identical tasks, its type, checkpointing and topology."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from itertools import count
from types import MappingProxyType

from caldera.model.jobtypes import (
    CRITICAL_PRIORITY,
    PRIORITY_CLASSES,
    SYSTEM_PRIORITY_CLASSES,
    JobType,
    PriorityClass,
)
from caldera.model.mig import slice_milli
from caldera.model.resources import GPU_MILLI, Resources

__all__ = [
    "Checkpointing",
    "JobSpec",
    "TopologyMode",
    "TopologySpec",
    "breaks_fractional_gpu_rule",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})


class TopologyMode(StrEnum):
    HARD = "hard"  # every task inside one tier-N domain, or the job does not start
    SOFT = "soft"  # prefer one tier-N domain, accept anything


@dataclass(frozen=True, slots=True)
class TopologySpec:
    mode: TopologyMode = TopologyMode.SOFT
    highest_tier: int = 1  # 1: one leaf switch (hypernode); 2: one spine


@dataclass(frozen=True, slots=True)
class Checkpointing:
    """How a job saves progress. `interval` None: it never checkpoints periodically."""

    interval: float | None = None
    cost: float = 0.0
    on_sigterm: bool = True

    def resume_point(self, work: float, saved: float) -> float:
        """Where a job that has done `work` seconds resumes after a hard stop: the later of
        the last recorded checkpoint (`saved`) and the last periodic one (every `interval`
        seconds of useful work), never beyond `work`."""
        interval = self.interval
        periodic = (work // interval) * interval if interval and interval > 0 else 0.0
        return min(max(saved, periodic), work)


def breaks_fractional_gpu_rule(gpu: int, tasks: int) -> bool:
    """DESIGN §2's fractional-GPU rule, the one definition: a fraction of one GPU (0 < `gpu`
    < 1000 milli-GPUs, a shared device) is for a single task, so a gang never spreads one
    share over several tasks. True when a request of `tasks` tasks of `gpu` breaks it.
    `JobSpec`, `caldera.runtime.requests` and the TrainingJob reader ask it, each with the
    message its users read. A MIG slice is not a fraction: its callers skip it."""
    return 0 < gpu < GPU_MILLI and tasks != 1


_NEXT_SHAPE = count()


@lru_cache(maxsize=1 << 16)
def _shape_id(key: tuple[object, ...]) -> int:
    """The id of one shape: 0, 1, 2, … in the order shapes are first seen, never reused.

    Bounded because a long-running service sees shapes without end (every new CPU or memory
    size is one) and must not keep them all. Below 65,536 distinct shapes nothing is ever
    forgotten and the ids are exactly the first-seen order. Past that the least recently
    seen shape is forgotten and, seen again, gets a new id: never another shape's, so two
    jobs with one id still fit alike; only jobs of that shape created long apart may land
    in separate pending groups."""
    return next(_NEXT_SHAPE)


def _intern_shape(spec: JobSpec) -> int:
    """A small int standing for everything placement looks at: jobs with equal shapes fit or
    fail alike on the same room, and an int is cheap to hash in the cycle's hot loops."""
    key = (
        spec.gpu,
        spec.cpu,
        spec.memory,
        spec.min_available,
        spec.topology,
        spec.gpu_models,
        spec.gpu_profile,
    )
    return _shape_id(key)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """An accepted request. Immutable: runtime facts live in the snapshot's JobView.

    `gpu` is milli-GPUs per task (below 1000 only for single-task jobs sharing a device);
    with `gpu_profile` each task takes one MIG slice of that profile instead, and `gpu` is the
    slice's GPU-equivalent (caldera.model.mig), whatever was given;
    `duration` is the useful work in seconds, known to the simulator only. `gang_request` is
    what it needs to start: `min_available` tasks. `shape` identifies the placement shape;
    `rank` orders jobs inside a queue: priority (high first), submit time, id.
    """

    id: str
    name: str
    queue: str
    type: JobType
    submit: float
    tasks: int = 1
    gpu: int = 1000
    cpu: int = 0
    memory: int = 0
    min_available: int = 0  # 0: all tasks
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    namespace: str = "default"
    priority_class_name: str = ""  # "" = the type's class; a system class marks conformance
    checkpoint: Checkpointing = Checkpointing()
    expected_duration: float | None = None
    topology: TopologySpec | None = None
    gpu_models: frozenset[str] | None = None
    duration: float | None = None
    max_retries: int = 0
    user: str = ""
    time_shared: int = 0  # N: one of N tasks time-sharing one GPU (`time_share`); 0: not
    gpu_profile: str | None = None  # a MIG profile ("1g.10gb"): one slice per task
    # Derived once: the cycle reads these tens of thousands of times.
    priority: int = field(init=False, repr=False, compare=False)
    task_request: Resources = field(init=False, repr=False, compare=False)
    gang_request: Resources = field(init=False, repr=False, compare=False)
    shape: int = field(init=False, repr=False, compare=False)
    may_preempt: bool = field(init=False, repr=False, compare=False)
    protected: bool = field(init=False, repr=False, compare=False)
    conformance_protected: bool = field(init=False, repr=False, compare=False)
    never_a_victim: bool = field(init=False, repr=False, compare=False)
    rank: tuple[int, float, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tasks < 1:
            raise ValueError("tasks must be at least 1")
        if self.min_available == 0:
            object.__setattr__(self, "min_available", self.tasks)
        if not 1 <= self.min_available <= self.tasks:
            raise ValueError("min_available must be between 1 and tasks")
        if self.gpu_profile is not None:
            if self.time_shared:
                raise ValueError("a MIG slice is never time-shared")
            object.__setattr__(self, "gpu", slice_milli(self.gpu_profile))
        elif breaks_fractional_gpu_rule(self.gpu, self.tasks):
            raise ValueError("fractional GPUs are allowed only for single-task jobs")
        if self.gpu > 1000 and self.gpu % 1000:
            raise ValueError("a task takes either a fraction of one GPU or whole GPUs")
        if self.time_shared and (self.time_shared < 2 or self.gpu != 1000 // self.time_shared):
            raise ValueError("a time-shared task takes 1/N of one GPU, N >= 2")
        if not isinstance(self.labels, MappingProxyType):
            object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        task = Resources(self.gpu, self.cpu, self.memory)
        object.__setattr__(self, "priority", PRIORITY_CLASSES[self.type].value)
        object.__setattr__(self, "task_request", task)
        object.__setattr__(self, "gang_request", task.scaled(self.min_available))
        object.__setattr__(self, "shape", _intern_shape(self))
        object.__setattr__(self, "rank", (-self.priority, self.submit, self.id))
        object.__setattr__(self, "may_preempt", PRIORITY_CLASSES[self.type].may_preempt)
        # Label protected: "true" — never chosen as a victim.
        object.__setattr__(self, "protected", self.labels.get("protected", "").lower() == "true")
        # Kubernetes conformance: system namespace, system priority class, system label.
        object.__setattr__(
            self,
            "conformance_protected",
            self.namespace == "kube-system"
            or self.priority_class_name in SYSTEM_PRIORITY_CLASSES
            or self.labels.get("caldera.io/system", "").lower() == "true",
        )
        # DESIGN §3 and §4.1 step 2, the one definition every runtime and the core ask:
        # critical priority, label protected, or conformance-protected.
        object.__setattr__(
            self,
            "never_a_victim",
            self.priority >= CRITICAL_PRIORITY or self.protected or self.conformance_protected,
        )

    @property
    def priority_class(self) -> PriorityClass:
        return PRIORITY_CLASSES[self.type]

    @property
    def full_request(self) -> Resources:
        return self.task_request.scaled(self.tasks)

    @property
    def whole_gpus(self) -> int:
        """Whole devices per task (0 for a shared fraction, a MIG slice or a CPU-only task)."""
        return 0 if self.gpu_profile is not None else self.gpu // 1000
