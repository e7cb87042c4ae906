"""Fair share over time (DESIGN §2, `policy.fair_share.half_life`; off by default): each
queue's GPU usage kept with exponential decay, Slurm's `PriorityDecayHalfLife` as the anchor.

A runtime keeps one `DecayedUsage` and advances it to each snapshot's time with what every
queue held since the last one (allocations change only at events, and a cycle runs at every
event, so a piecewise-constant integral is exact); the snapshot hands the core a view of it.
The core reads it in one place only: when queues compete for idle room beyond their deserved
shares, the one with the lowest decayed usage ÷ deserved goes first (`lending_key`, used by
allocate). It never changes who may reclaim what, nor any guarantee.

A restart must not reset fair share: every runtime that outlives a process keeps a
`DecayedRecord` (the service in its database, the controller in its state ConfigMap) at most
`SAVE_EVERY` seconds old, and starts from it (`DecayedUsage.restored`). What each queue held
at the record's time counts on across the downtime — running work keeps running while no
scheduler decides, and is adopted when it comes back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from caldera.core.usage import QueueUsage

__all__ = ["SAVE_EVERY", "DecayedRecord", "DecayedUsage", "lending_key"]

SAVE_EVERY = 60.0
"""How often (seconds of a runtime's clock) a runtime writes its decayed usage: with
half-lives of hours to days, a restart forgets at most a minute of usage, and a busy runtime
writes once a minute rather than once a cycle."""


@dataclass(frozen=True, slots=True)
class DecayedRecord:
    """What a runtime keeps of a `DecayedUsage` across restarts: the time it was brought to
    (`at`), each queue's decayed usage then (milli-GPU-seconds) and the milli-GPUs each has
    held since."""

    at: float
    used: Mapping[str, float]
    held: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "used": dict(sorted(self.used.items())),
            "held": dict(sorted(self.held.items())),
        }

    @classmethod
    def from_json(cls, data: object) -> DecayedRecord:
        """Parse a stored record (a ConfigMap anyone with access may edit): ValueError with
        one line saying what is wrong, never another exception."""
        if not isinstance(data, dict):
            raise ValueError("decayed usage: not an object")
        at = data.get("at")
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            raise ValueError("decayed usage: 'at' is not a finite number")
        used = _per_queue(data.get("used"), "used", float)
        held = _per_queue(data.get("held"), "held", int)
        return cls(float(at), {q: float(v) for q, v in used.items()}, held)


def _per_queue(value: object, field: str, kind: type[float] | type[int]) -> dict[str, Any]:
    """A queue → non-negative number map of a stored record (`kind` int: whole numbers)."""
    if not isinstance(value, dict):
        raise ValueError(f"decayed usage: {field!r} is not an object")
    rows: dict[str, Any] = {}
    for queue, number in value.items():
        whole = kind is int and isinstance(number, int)
        finite = isinstance(number, int | float) and math.isfinite(number)
        if (
            not isinstance(queue, str)
            or isinstance(number, bool)
            or not finite
            or number < 0
            or (kind is int and not whole)
        ):
            raise ValueError(f"decayed usage: {field}[{queue!r}] is not a non-negative number")
        rows[queue] = number
    return rows


class DecayedUsage:
    """Per queue: milli-GPU-seconds used, each second's worth halving every `half_life`
    seconds after it was used. Kept by a runtime (state over time), read by the core."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.at: float | None = None
        self.used: dict[str, float] = {}
        self.held: dict[str, int] = {}  # milli-GPUs each queue held since `at`
        self.saved_at: float | None = None  # when a runtime last kept a record of it

    @classmethod
    def restored(cls, half_life: float, record: DecayedRecord) -> DecayedUsage:
        """The usage a runtime kept (`record`), to carry on from. A record kept under another
        half-life decays from here on under this one (what it sums is not recomputed)."""
        usage = cls(half_life)
        usage.at = record.at
        usage.used = dict(record.used)
        usage.held = {queue: gpu for queue, gpu in record.held.items() if gpu}
        usage.saved_at = record.at
        return usage

    def record(self) -> DecayedRecord | None:
        """What to keep across a restart (None: never advanced, nothing to keep)."""
        if self.at is None:
            return None
        return DecayedRecord(self.at, dict(self.used), dict(self.held))

    def due(self, now: float) -> bool:
        """Should a runtime keep a record now (`SAVE_EVERY` since the last, or never kept)?"""
        return self.at is not None and (
            self.saved_at is None or not 0 <= now - self.saved_at < SAVE_EVERY
        )

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
