"""The service's counters since it started, for /metrics: cycles, and the GPU time allocated
and held by hung gangs, integrated each time the loop looks at the processes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from caldera.model import JobState
from caldera.runtime import KernelStats
from caldera.service.jobs import LiveJob

__all__ = ["RuntimeStats"]


@dataclass
class RuntimeStats:
    """Counters since this server started, for /metrics."""

    cycles: int = 0
    allocated_area: float = 0.0  # milli-GPU seconds allocated
    hung_area: float = 0.0  # milli-GPU seconds held by gangs below min_available
    observed: float = 0.0
    last_poll: float | None = None
    kernel: KernelStats = field(default_factory=KernelStats)

    @property
    def refused_evictions(self) -> int:
        return self.kernel.refused_evictions

    @property
    def throttle_held_seconds(self) -> float:
        return self.kernel.throttle_held_seconds

    def integrate(self, now: float, allocated_milli: int, holding: Iterable[LiveJob]) -> None:
        """Add the time since the last look: `allocated_milli` GPU allocated all along, and
        the GPUs of every gang below its `min_available` (a member died; until the others
        are stopped)."""
        last = self.last_poll
        self.last_poll = now
        if last is None or now <= last:
            return
        self.allocated_area += allocated_milli * (now - last)
        self.observed += now - last
        for job in holding:
            alive = [t for t in job.running if not t.done]
            if alive and job.state is JobState.RUNNING and len(alive) < job.spec.min_available:
                self.hung_area += sum(t.placement.gpu for t in alive) * (now - last)
