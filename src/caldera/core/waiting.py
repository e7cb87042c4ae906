"""Why pending jobs did not start: read off what the phases did, after the last one and before
the working room rolls back, so that every runtime shows the reason the cycle itself had.

May: read the cycle's context, its working room and the snapshot. May not: change anything.

One `Waiting` per pending group (its jobs fit, fail and search alike), judged on the group's
first job that neither started nor holds reserved room; one more per preemptor holding
reserved room. Checked in this order:

  1. closed       the queue is Closed: its pending jobs wait (DESIGN §2);
  2. capability   the gang is larger than the queue's cap, or the queue is at its cap;
  3. victims      room is reserved for the job and its victims have yet to release it;
  4. no-victims   no room, and the search for jobs that may give way found none (this
                  cycle, or within the back-off after the last search);
  5. topology     enough whole GPUs are free, but not inside one domain of the tier its hard
                  topology allows;
  6. fragmented   enough GPUs are free, but no node or NVLink island fits its tasks;
  7. no-room      not enough free GPUs (a debug job never preempts; other jobs were not
                  searched for because the cycle's eviction budget was spent).

A starving large job with a planned start (core/planning.py) gets its own entry too: its
group's reason, the plan first — "planned on leaf-3 at 14:20 (in 35 min); needs 64 GPUs; 3
free" — so every runtime shows it where it shows a waiting reason.

Held jobs get no entry: their hold reason (throttle, window) says why they wait.
The cost is per pending group and per preemptor, never per pending job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from caldera.core.backoff import back_off_ends
from caldera.core.context import CycleContext
from caldera.core.decisions import Waiting, WaitReason
from caldera.core.jobindex import GroupKey, group_key
from caldera.core.planning import plans
from caldera.core.snapshot import JobView, Nomination
from caldera.model import GPU_MILLI, JobSpec, QueueState, TopologyMode

__all__ = ["WaitingReasons", "waiting_reasons"]


@dataclass(frozen=True)
class WaitingReasons:
    """A cycle's `Decisions.waiting`, looked up per job: its own entry, else its group's."""

    by_group: Mapping[GroupKey, Waiting] = field(default_factory=dict)
    by_job: Mapping[str, Waiting] = field(default_factory=dict)

    @classmethod
    def of(cls, waiting: Iterable[Waiting]) -> WaitingReasons:
        by_group: dict[GroupKey, Waiting] = {}
        by_job: dict[str, Waiting] = {}
        for entry in waiting:
            if entry.job is None:
                by_group[entry.group] = entry
            else:
                by_job[entry.job] = entry
        return cls(by_group, by_job)

    def reason(self, spec: JobSpec) -> Waiting | None:
        """Why a job still pending after the cycle did not start (None: not said)."""
        own = self.by_job.get(spec.id)
        if own is not None:
            return own
        return self.by_group.get(group_key(spec))


def waiting_reasons(cycle: CycleContext) -> tuple[Waiting, ...]:
    nominations = _nominations(cycle)
    eligible = {key for key, _ in cycle.eligible_groups}
    first_waiting = {key: first for (key, _), first in cycle.waiting}
    unplaced = {job.id for job in cycle.unplaced}
    planned_starts = plans(cycle)
    found: list[Waiting] = []
    for key, jobs in cycle.snapshot.job_index.pending.items():
        position = first_waiting.get(key, 0)
        for job in jobs[position:]:
            if job.id in cycle.decided.started:
                continue
            if nominations.get(job.id, job.nomination) is not None:
                continue  # explained on its own below
            reason = _group_reason(cycle, key, job, key in eligible, key in first_waiting, unplaced)
            if reason is not None:
                found.append(Waiting(key, *reason))
                planned = planned_starts.get(job.id)
                if planned is not None:  # its own entry: the plan leads, the reason follows
                    described = planned.describe(cycle.now, cycle.config.week_offset)
                    found.append(Waiting(key, reason[0], f"{described}; {reason[1]}", job.id))
            break
    for job_id, nomination in sorted(nominations.items()):
        preemptor = cycle.jobs.get(job_id)
        if nomination is None or preemptor is None or job_id in cycle.decided.started:
            continue
        detail = _victims(cycle, nomination)
        found.append(Waiting(group_key(preemptor.spec), WaitReason.VICTIMS, detail, job_id))
    return tuple(found)


def _nominations(cycle: CycleContext) -> dict[str, Nomination | None]:
    """Each preemptor's reserved room as the cycle leaves it (None: dropped or started)."""
    final = {job_id: job.nomination for job_id, job in cycle.snapshot.job_index.nominated.items()}
    for nominate in cycle.decided.nominations:
        final[nominate.job] = nominate.nomination
    return final


def _group_reason(
    cycle: CycleContext,
    key: GroupKey,
    job: JobView,
    eligible: bool,
    did_not_fit: bool,
    unplaced: set[str],
) -> tuple[WaitReason, str] | None:
    queue = cycle.snapshot.queues.get(key[0])
    if queue is None:
        return None
    spec = job.spec
    gang = spec.gang_request
    if queue.state is QueueState.CLOSED:
        return WaitReason.CLOSED, f"queue {queue.name} is Closed"
    if not eligible:
        capability = queue.capability
        if capability is not None and not gang.fits_in(capability):
            return WaitReason.CAPABILITY, (
                f"needs {_gpus(gang.gpu)} GPUs; queue {queue.name} is capped at "
                f"{_gpus(capability.gpu)}"
            )
        return None  # outside its queue's window: Held, and the hold says so
    usage = cycle.usage.get(queue.name)
    if usage is not None and not usage.within_capability(gang):
        cap = queue.capability.gpu if queue.capability is not None else 0
        return WaitReason.CAPABILITY, (
            f"queue {queue.name} holds {_gpus(usage.allocated.gpu + usage.promised.gpu)} of its "
            f"cap of {_gpus(cap)} GPUs; needs {_gpus(gang.gpu)} more"
        )
    if not did_not_fit and job.id not in unplaced:
        return None  # not reached by a job-by-job policy this cycle; nothing to tell
    searched = job.id in cycle.decided.missed or (
        back_off_ends(job.preempt_failed_at, spec.priority, cycle.now, cycle.config.preempt_backoff)
        is not None
    )
    if searched:
        return WaitReason.NO_VICTIMS, (
            f"no room for {_gpus(gang.gpu)} GPUs, and no running job may give way to it "
            "(higher or equal priority, protected, in cooldown, or its queue's share)"
        )
    reason, detail = _room(cycle, job)
    if not spec.may_preempt:
        detail += f"; {spec.type.value} jobs never preempt"
    return reason, detail


def _room(cycle: CycleContext, job: JobView) -> tuple[WaitReason, str]:
    """No room: not enough GPUs free, or free GPUs in the wrong places."""
    spec = job.spec
    room = cycle.room
    if spec.gpu_profile is not None:
        free = room.free_slices(spec.gpu_profile, models=spec.gpu_models)
        return WaitReason.NO_ROOM, (
            f"needs {spec.min_available} free {spec.gpu_profile} MIG slice(s); {free} free"
        )
    if spec.gpu < GPU_MILLI:
        share = spec.gpu / GPU_MILLI
        return WaitReason.NO_ROOM, f"no GPU has {share:g} of a device free"
    free = room.free_whole(spec.gpu_models) * GPU_MILLI
    need = spec.gang_request.gpu
    models = f" {'/'.join(sorted(spec.gpu_models))}" if spec.gpu_models else ""
    if free < need:
        return WaitReason.NO_ROOM, f"needs {_gpus(need)}{models} GPUs; {_gpus(free)} free"
    topology = spec.topology
    if topology is not None and topology.mode is TopologyMode.HARD:
        domains = room.tier1_whole if topology.highest_tier <= 1 else room.tier2_whole
        best = max(domains.values(), default=0) * GPU_MILLI
        if best < need:
            return WaitReason.TOPOLOGY, (
                f"needs {_gpus(need)} GPUs inside one tier-{topology.highest_tier} domain; "
                f"the freest has {_gpus(best)} ({_gpus(free)} free in all)"
            )
    per_task = spec.gpu // GPU_MILLI
    return WaitReason.FRAGMENTED, (
        f"{_gpus(free)} GPUs free, but not {per_task} together on one node or NVLink island "
        f"for each of {spec.min_available} tasks"
    )


def _victims(cycle: CycleContext, nomination: Nomination) -> str:
    releasing = [
        victim
        for victim in nomination.victims
        if (view := cycle.jobs.get(victim)) is not None
        and (view.releasing or victim in cycle.decided.evicted)
    ]
    waiting = len(nomination.pending)
    detail = f"room reserved; waiting for {len(releasing)} preempted job(s) to release it"
    if releasing:
        detail += f" ({', '.join(releasing[:4])}{', …' if len(releasing) > 4 else ''})"
    if waiting:
        detail += f"; {waiting} more to be signalled (eviction budget)"
    return detail


def _gpus(milli: int) -> str:
    return f"{milli / GPU_MILLI:g}"
