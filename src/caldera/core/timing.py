"""Evictions timed to checkpoints, or to a victim's likely end (DESIGN §4.4, last point).

A victim that cannot write an emergency checkpoint loses the work done since its last
periodic one. When its next periodic checkpoint comes soon enough — the preemptor can still
start within its start SLO once the victim is signalled just after that checkpoint and has
released its room — the plan is made now (its room promised to the preemptor, its victims
committed to it) but that victim is signalled then: the work lost tends to zero without any
emergency-checkpoint support. The nomination carries the moment (`PendingVictim.at`); the
driver signals such a victim once it is due (eviction.continue_nominations), like a victim
the eviction budget left to a later cycle, so every runtime carries it out unchanged.

Per victim of a plan that would lose work now:
  - a victim that would lose work: just after its next periodic checkpoint, when that comes
    within `checkpoint_wait` of the preemptor's submission (default 600 s: a large job still
    starts within ten minutes when it can, issue 3);
  - else — it takes no periodic checkpoint, or the next comes too late — it may be *waited
    for to end by itself*: signalled at the last moment that still lets the preemptor start
    `FINISH_MARGIN` before its start SLO runs out, when the learned chance that it ends by
    then (core/estimates.py `chance_to_end`: among finished jobs of its queue and type that
    ran longer than it has, the share that ended by then) makes waiting the smaller expected
    loss — p * (work lost now) >= (1 - p) * (work it would do meanwhile and lose). A victim
    that ends by itself loses nothing and frees its room for the preemptor, like one gone;
  - one that has just taken one (within `CHECKPOINT_MARGIN`): now;
  - one that loses nothing (it checkpoints on SIGTERM, or gives up tasks above its minimum):
    at the latest of those moments, so that it works on meanwhile.
All or nothing: if a losing victim can be neither timed nor waited for, or the preemptor
would start after its SLO or after its nomination would go stale (`nomination_timeout`),
every victim is signalled now, as before. `checkpoint_wait: 0` turns all of it off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from caldera.core.config import PolicyConfig
from caldera.core.estimates import EstimateKey, chance_to_end, slo_deadline
from caldera.core.victims import Plan, Unit
from caldera.core.views import JobView, PendingVictim
from caldera.model import GPU_MILLI

__all__ = [
    "CHECKPOINT_MARGIN",
    "FINISH_MARGIN",
    "next_checkpoint",
    "next_signal",
    "signal_times",
]

CHECKPOINT_MARGIN = 1.0
"""Seconds after a victim's periodic checkpoint at which a timed eviction signals it: just
after, so that the checkpoint is surely written (a runtime's clock is not exact)."""


FINISH_MARGIN = 60.0
"""Seconds before the preemptor's start SLO runs out by which a victim waited for (to end by
itself) has released its room: the preemptor's start is not left to the last second."""


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
    preemptor: JobView,
    plan: Plan,
    config: PolicyConfig,
    now: float,
    estimates: Mapping[EstimateKey, float] | None = None,
) -> Mapping[str, float]:
    """Victim id -> when to signal it (module docstring); empty: all of them now."""
    if plan.cost.lost <= 0 or config.checkpoint_wait <= 0:
        return {}
    slo = slo_deadline(preemptor.spec, config)
    if slo is None:
        return {}
    # The preemptor must still start within its SLO, before its nomination goes stale.
    slo = min(slo, now + config.nomination_timeout)
    deadline = min(slo, preemptor.spec.submit + config.checkpoint_wait)
    learned = MappingProxyType({}) if estimates is None else estimates
    times: dict[str, float] = {}
    savers: list[str] = []
    ready = now  # when the last timed victim has released its room
    latest = now
    for unit in plan.units:
        victim = unit.job
        if unit.lost <= 0:
            savers.append(victim.id)
            continue
        at = _after_checkpoint(victim, now)
        if at is None or at + unit.delay > deadline:
            # No checkpoint in time: perhaps it ends by itself before the preemptor must go.
            at = _end_by_itself(unit, learned, now, slo - FINISH_MARGIN - unit.delay)
        if at is None:
            return {}
        times[victim.id] = min(times.get(victim.id, at), at)
        latest = max(latest, at)
        ready = max(ready, at + unit.delay)
    for victim_id in savers:
        if victim_id not in times:
            times[victim_id] = latest
    ready = max([ready, *(latest + u.delay for u in plan.units if u.job.id in savers)])
    if latest <= now or ready > slo:
        return {}
    return times


def _after_checkpoint(victim: JobView, now: float) -> float | None:
    """Now if the victim has just checkpointed, else just after its next periodic checkpoint
    (None: it takes none)."""
    if _just_checkpointed(victim, now):
        return now
    checkpoint = next_checkpoint(victim, now)
    return None if checkpoint is None else checkpoint + CHECKPOINT_MARGIN


def _end_by_itself(
    unit: Unit, estimates: Mapping[EstimateKey, float], now: float, at: float
) -> float | None:
    """`at`, when waiting until then for the victim to end by itself is expected to lose
    less than evicting it now (None: evict now). It loses `unit.lost` now, and as much more
    per second as it holds GPUs while it runs on; so waiting pays when the learned chance p
    that it ends by `at` (core/estimates.py) has p * lost >= (1 - p) * extra."""
    if at <= now:
        return None
    chance = chance_to_end(unit.job, estimates, now, at)
    if chance is None:
        return None
    extra = unit.gpu / GPU_MILLI * (at - now)
    return at if chance * unit.lost >= (1 - chance) * extra else None


def next_signal(pending: Sequence[PendingVictim], now: float) -> float:
    """When a nomination's next pending victim is due: its timed moment, or the next cycle
    (now + 1 s) for one the eviction budget held back."""
    return min(p.at if p.at is not None and p.at > now else now + 1 for p in pending)
