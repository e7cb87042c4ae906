"""Evictions timed to checkpoints (DESIGN §4.4, last point).

A victim that cannot write an emergency checkpoint loses the work done since its last
periodic one. When its next periodic checkpoint comes soon enough — the preemptor can still
start within its start SLO once the victim is signalled just after that checkpoint and has
released its room — the plan is made now (its room promised to the preemptor, its victims
committed to it) but that victim is signalled then: the work lost tends to zero without any
emergency-checkpoint support. The nomination carries the moment (`PendingVictim.at`); the
driver signals such a victim once it is due (eviction.continue_nominations), like a victim
the eviction budget left to a later cycle, so every runtime carries it out unchanged.

Per victim of a plan that would lose work now:
  - a victim that would lose work: just after its next periodic checkpoint;
  - one that has just taken one (within `CHECKPOINT_MARGIN`): now;
  - one that loses nothing (it checkpoints on SIGTERM, or gives up tasks above its minimum):
    at the latest of those moments, so that it works on meanwhile.
All or nothing: if a losing victim takes no periodic checkpoint, or the last of them comes
too late — its release after the preemptor's start SLO, later than `checkpoint_wait` after
the preemptor's submission (default 600 s: a large job still starts within ten minutes when
it can, issue 3), or after the preemptor's nomination would go stale (`nomination_timeout`)
— every victim is signalled now, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from caldera.core.config import PolicyConfig
from caldera.core.estimates import slo_deadline
from caldera.core.victims import Plan
from caldera.core.views import JobView, PendingVictim

__all__ = ["CHECKPOINT_MARGIN", "next_checkpoint", "next_signal", "signal_times"]

CHECKPOINT_MARGIN = 1.0
"""Seconds after a victim's periodic checkpoint at which a timed eviction signals it: just
after, so that the checkpoint is surely written (a runtime's clock is not exact)."""


def next_checkpoint(victim: JobView, now: float) -> float | None:
    """When a running victim next reaches a periodic checkpoint (None: it takes none, or
    makes no progress)."""
    interval = victim.spec.checkpoint.interval
    if not interval or interval <= 0 or victim.running_since is None:
        return None
    work = victim.work_done(now)
    return now + ((work // interval) + 1) * interval - work


def _just_checkpointed(victim: JobView, now: float) -> bool:
    """Did the victim's last periodic checkpoint pass at most `CHECKPOINT_MARGIN` ago?"""
    interval = victim.spec.checkpoint.interval
    if not interval or interval <= 0:
        return False
    work = victim.work_done(now)
    return work >= interval and work % interval <= CHECKPOINT_MARGIN


def signal_times(
    preemptor: JobView, plan: Plan, config: PolicyConfig, now: float
) -> Mapping[str, float]:
    """Victim id -> when to signal it (module docstring); empty: all of them now."""
    if plan.cost.lost <= 0:
        return {}
    deadline = slo_deadline(preemptor.spec, config)
    if deadline is None or config.checkpoint_wait <= 0:
        return {}
    submit = preemptor.spec.submit
    deadline = min(deadline, submit + config.checkpoint_wait, now + config.nomination_timeout)
    times: dict[str, float] = {}
    savers: list[str] = []
    ready = now  # when the last timed victim has released its room
    latest = now
    for unit in plan.units:
        victim = unit.job
        if unit.lost <= 0:
            savers.append(victim.id)
            continue
        if _just_checkpointed(victim, now):
            at = now
        else:
            checkpoint = next_checkpoint(victim, now)
            if checkpoint is None:
                return {}
            at = checkpoint + CHECKPOINT_MARGIN
        times[victim.id] = min(times.get(victim.id, at), at)
        latest = max(latest, at)
        ready = max(ready, at + unit.delay)
    for victim_id in savers:
        if victim_id not in times:
            times[victim_id] = latest
    ready = max([ready, *(latest + u.delay for u in plan.units if u.job.id in savers)])
    if latest <= now or ready > deadline:
        return {}
    return times


def next_signal(pending: Sequence[PendingVictim], now: float) -> float:
    """When a nomination's next pending victim is due: its timed moment, or the next cycle
    (now + 1 s) for one the eviction budget held back."""
    return min(p.at if p.at is not None and p.at > now else now + 1 for p in pending)
