"""Planned starts for starving large jobs (DESIGN §4.4; Slurm's backfill as the anchor).

A starving large job reserves the free whole GPUs of one domain (reservation.py); freed room
there accumulates until its gang fits. Its *planned start* says when that is expected: from
the domain's free whole GPUs now and the running and releasing jobs there, by their expected
ends (`release_at`; `expected_duration`, else the learned estimate of their queue and type,
core/estimates.py), the earliest time at which enough GPUs are free. The count ignores how
the GPUs lie on nodes and NVLink islands, so the planned start is never later than the
earliest the gang could fit: a job that must end before it is held to the stricter bound.

What it is for:
  - backfill (core/backfill.py): waiting work may use the reserved room only if it is
    expected to end before the planned start — so it delays no reservation;
  - the job's waiting reason: "planned on leaf-3 at 14:20" (core/waiting.py), in every
    runtime, as the cycle itself had it.

An unknown end (no expected_duration, nothing learned) makes the planned start unknown from
that job on: no plan, and nothing uses the reserved room, as before plans existed.

Time alone moves a planned start only later and never further from `now` (every expected
end is max(a fixed time, now)): what may use the room only shrinks as time passes, so a
cycle that started nothing on it decides the same later on the same state (core/shortcuts/quiet.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from caldera.core.context import CycleContext
from caldera.core.estimates import expected_end
from caldera.core.room import Room
from caldera.core.snapshot import JobView
from caldera.model import JobSpec, JobState

__all__ = ["PLANS", "PlannedStart", "domain_label", "plan_start", "plans"]

PLANS = "planned starts"
"""The cycle memo of this cycle's planned starts: job id -> `PlannedStart`."""


@dataclass(frozen=True, slots=True)
class PlannedStart:
    """Where and when a starving large job is expected to be able to start."""

    job: str
    nodes: tuple[int, ...]  # the domain whose free room is reserved for it
    at: float  # seconds: the earliest its gang's GPUs are expected to be free there
    where: str  # the domain for people: leaf-3, spine-0, a node's name

    def describe(self, now: float, week_offset: float) -> str:
        """ "planned on leaf-3 at 14:20 (in 35 min)", the clock from `week_offset`."""
        clock = (self.at + week_offset) % 86_400
        hours, minutes = int(clock // 3600), int(clock % 3600 // 60)
        wait = max(self.at - now, 0.0)
        return f"planned on {self.where} at {hours:02d}:{minutes:02d} (in {wait / 60:.0f} min)"


def plans(cycle: CycleContext) -> dict[str, PlannedStart]:
    """This cycle's planned starts (made by reservation.py)."""
    found: dict[str, PlannedStart] = cycle.memo(PLANS, dict)
    return found


def domain_label(room: Room, nodes: Sequence[int]) -> str:
    """A node's name, leaf-<tier-1 id>, spine-<tier-2 id>, or "the cluster"."""
    if len(nodes) == 1:
        return room.nodes[nodes[0]].name
    leaves = {room.nodes[n].tier1 for n in nodes}
    if len(leaves) == 1:
        return f"leaf-{next(iter(leaves))}"
    spines = {room.nodes[n].tier2 for n in nodes}
    if len(spines) == 1:
        return f"spine-{next(iter(spines))}"
    return "the cluster"


def plan_start(cycle: CycleContext, job: JobView, nodes: Sequence[int]) -> PlannedStart | None:
    """The planned start of `job` in the domain `nodes` (module docstring), None when some job
    it would wait for has no expected end."""
    spec = job.spec
    need = spec.whole_gpus * spec.min_available
    if need <= 0:
        return None
    room, now = cycle.room, cycle.now
    domain = set(_usable(room, spec, nodes))
    free = sum(room.whole[n] for n in domain)
    at = now
    if free < need:
        ends: list[tuple[float, int]] = []
        estimates = cycle.snapshot.estimates
        index = cycle.snapshot.job_index
        for state in (JobState.RUNNING, JobState.RELEASING):
            for other in index.by_state[state].values():
                devices = _devices_on(other, domain)
                if devices:
                    ends.append((_end(other, estimates, now), devices))
        ends.sort()
        for end, devices in ends:
            free += devices
            if free >= need:
                at = end
                break
        else:
            return None
        if math.isinf(at):
            return None
    return PlannedStart(job.id, tuple(nodes), at, domain_label(room, nodes))


def _usable(room: Room, spec: JobSpec, nodes: Sequence[int]) -> list[int]:
    models = spec.gpu_models
    return [n for n in nodes if models is None or room.nodes[n].gpu_model in models]


def _devices_on(job: JobView, domain: set[int]) -> int:
    """GPU devices the job holds on the domain's nodes, running or releasing."""
    count = 0
    for task in (*job.placement, *job.releasing):
        if task.node in domain:
            count += len(task.devices)
    return count


def _end(job: JobView, estimates: Mapping[tuple[str, str], float], now: float) -> float:
    if job.state is JobState.RELEASING and job.release_at is not None:
        return max(job.release_at, now)
    return expected_end(job, estimates, now)
