"""Backing off: a preemptor whose victim search failed does not search again for a while.

The search is the cycle's most expensive step, and a search that just failed mostly fails
again, so a non-critical job whose last search failed less than `preempt_backoff` seconds
ago (`JobView.preempt_failed_at`, set by the runtime from `Decisions.preempt_misses`) waits
until then, with a wake-up at the end. A critical job always searches: its start SLO is
short. Every place that asks — give_way (core/eviction.py), the quiet-cycle check
(core/shortcuts/quiet.py) and the waiting reasons (core/waiting.py) — asks here.
"""

from __future__ import annotations

from caldera.model import CRITICAL_PRIORITY

__all__ = ["back_off_ends"]


def back_off_ends(
    failed_at: float | None, priority: int, now: float, backoff: float
) -> float | None:
    """When the back-off of a preemptor at `priority` whose last victim search failed at
    `failed_at` ends, if it is backing off at `now`; None when it may search now."""
    if failed_at is not None and priority < CRITICAL_PRIORITY and now - failed_at < backoff:
        return failed_at + backoff
    return None
