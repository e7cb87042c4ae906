"""Fair share over time (DESIGN §2, `policy.fair_share.half_life`; off by default): each
queue's GPU usage kept with exponential decay, Slurm's `PriorityDecayHalfLife` as the anchor.

A runtime keeps one `DecayedUsage` and advances it to each snapshot's time with what every
queue held since the last one (allocations change only at events, and a cycle runs at every
event, so a piecewise-constant integral is exact); the snapshot hands the core a view of it.
The core reads it in one place only: when queues compete for idle room beyond their deserved
shares, the one with the lowest decayed usage ÷ deserved goes first (`lending_key`, used by
allocate). It never changes who may reclaim what, nor any guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from caldera.core.context import QueueUsage

__all__ = ["DecayedUsage", "lending_key"]


class DecayedUsage:
    """Per queue: milli-GPU-seconds used, each second's worth halving every `half_life`
    seconds after it was used. Kept by a runtime (state over time), read by the core."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.at: float | None = None
        self.used: dict[str, float] = {}
        self.held: dict[str, int] = {}  # milli-GPUs each queue held since `at`

    def advance(self, now: float, held: Mapping[str, int]) -> None:
        """Bring the usage to `now` (what each queue held since the last call counts, with
        its decay), then remember what each holds from now on."""
        if self.half_life > 0 and self.at is not None and now > self.at:
            factor = 0.5 ** ((now - self.at) / self.half_life)
            # ∫ 2^(-s/h) ds over the span, for a constant allocation since `at`
            integral = self.half_life / math.log(2) * (1 - factor)
            for queue in set(self.used) | set(self.held):
                self.used[queue] = (
                    self.used.get(queue, 0.0) * factor + self.held.get(queue, 0) * integral
                )
        if self.at is None or now >= self.at:
            self.at = now
        self.held = {queue: gpu for queue, gpu in held.items() if gpu}

    def view(self) -> Mapping[str, float]:
        return MappingProxyType(dict(self.used))


def _over_key(share: float, used: float, deserved: int) -> float:
    """Below its deserved share: its share (first). At or above it: 1 + decayed usage ÷
    deserved, so queues competing beyond their shares go lowest decayed usage first."""
    if share < 1:
        return share
    if deserved <= 0:
        return math.inf
    return 1 + used / deserved


def lending_key(usage: QueueUsage, decayed: Mapping[str, float]) -> tuple[float, float]:
    """allocate's order of queues: department first, then the queue itself (DESIGN §2
    "Hierarchy"); by share, or — with fair share over time (`decayed` not empty) — by decayed
    usage ÷ deserved among those beyond their deserved share. Off: (tree_share, share)."""
    if not decayed:
        return usage.tree_share, usage.share
    own = _over_key(usage.share, decayed.get(usage.queue.name, 0.0), usage.deserved.gpu)
    top = usage.top
    if top is usage:
        return own, own
    used = sum(decayed.get(child.queue.name, 0.0) for child in top.children)
    return _over_key(usage.tree_share, used, top.deserved.gpu), own
