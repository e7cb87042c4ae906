"""What a cycle remembers from the last one: victim searches that failed, while nothing that
could change their answer has happened.

Under a backlog most cycles are triggered by arrivals, and the same waiting groups search
the same running jobs for the same shapes, cycle after cycle, in vain. A failed search is
settled until one of these happens:

1. free room changes outside a cycle (`Room.version`: a runtime applied a start or a
   release);
2. a job that runs, releases, or holds a nomination appears, changes or leaves, or a pending
   large job leaves the pending set without starting (`JobIndex.version`) — new victims,
   freed room, a promise given up, a queue's usage moved, room reserved for a starving job
   no longer reserved;
3. the policy settings, the queues or the nodes change (a drain, a cordon, a lost GPU);
4. time passes a point where the search's own rules loosen: a running job's cooldown ends
   (it becomes a candidate again), a critical preemptor's SLO runs out (its plans need no
   longer finish within it), `lossy_patience` ends (a lossy plan becomes acceptable), a
   large job starts to starve (it then searches with its reserved room, reservation.py), a
   queue's time window opens or closes (a closing window takes that queue's pending jobs, and
   the room reserved for one of them, out of the cycle);
5. the group's first job changes (its submit time sets those points).

Only searches that found no plan are settled: a plan the preemptor declined because every
plan loses work (`lossy_patience`) is searched again next time, since a victim's next
periodic checkpoint can make it lossless with nothing else changing. Nor is a failure in
which reclaim's floor turned a unit away for what earlier units of its queue took
(`FloorVeto.order_mattered`): which units join then depends on the candidates' order, and
time alone moves it (their lost work and weights), so the same search may succeed later.

A settled search is taken only while the cycle has decided nothing: a start earlier in the
cycle (a critical job placed in its own pass) may put its queue above its deserved share —
its running jobs become borrowers to reclaim — or leave a starving job's queue unable to
hold its reservation, whose room is then free (tests/sim/found/memo-*.yaml).

Before a search is even built, a count can settle it in the same cycle: `domains.never_fits`
counts the whole GPUs each node could have if every candidate were gone (from the job
index's per-node device counts); when even that cannot hold the gang, no victim set can.

Everything else that happens between two cycles only *tightens* what a waiting group is
offered: a new pending job competes for room and victims, it never adds any; effective
weights only grow with time (fewer candidates); a job leaving the pending set without ever
starting or nominating took nothing — unless room was reserved for it (a starving large job),
which is why such a job's leaving counts in 2. So the memo is exact: a cycle decides the same
with and without it (a property test runs workloads both ways and compares every decision).

Pure: the snapshot carries the last cycle's `SearchMemo` in, `Decisions.memo` carries the new
one out, and the runtime hands it back with the next snapshot. It also carries the record of a
cycle that decided nothing (`QuietCycle`), from which the next cycle may be answered without
running the phases when nothing but time and pending arrivals changed (core/shortcuts/quiet.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from caldera.core.config import PolicyConfig
from caldera.core.jobindex import GroupKey, JobIndex
from caldera.core.room import Room
from caldera.model import Node, Queue

if TYPE_CHECKING:
    from caldera.core.shortcuts.quiet import QuietCycle

__all__ = ["FailedSearch", "SearchKey", "SearchMemo", "Stamp"]

SearchKey = tuple[str, GroupKey]
"""(phase: preempt or reclaim, the waiting group)."""


@dataclass(frozen=True, slots=True)
class FailedSearch:
    """The group's first job found no plan; settled until `until` (simulated time).
    `wake`: the wake-up its search asked for (reclaim: when its start SLO runs out, core/
    reclaim.py), asked again on every hit so that a cycle with the memo asks what one
    without it would."""

    head: str
    until: float
    wake: float | None = None


@dataclass(frozen=True)
class Stamp:
    """The state a memo's failures were found in (what a later cycle must still see)."""

    room: tuple[int, int]  # (token, version)
    index: tuple[int, int]
    config: PolicyConfig
    queues: Mapping[str, Queue]
    nodes: tuple[Node, ...]  # a drained, cordoned or replaced node changes the answer too

    @classmethod
    def of(
        cls,
        room: Room,
        index: JobIndex,
        config: PolicyConfig,
        queues: Mapping[str, Queue],
        nodes: tuple[Node, ...],
    ) -> Stamp:
        return cls((room.token, room.version), (index.token, index.version), config, queues, nodes)

    def holds_for(self, other: Stamp) -> bool:
        """Same room and index at the same versions, equal settings, queues and nodes."""
        return (
            self.room == other.room
            and self.index == other.index
            and self.config == other.config
            and (self.queues is other.queues or dict(self.queues) == dict(other.queues))
            and (self.nodes is other.nodes or self.nodes == other.nodes)
        )


@dataclass(frozen=True)
class SearchMemo:
    """Failed victim searches and the state they failed in."""

    stamp: Stamp
    failed: Mapping[SearchKey, FailedSearch] = field(default_factory=lambda: MappingProxyType({}))
    hits: int = 0  # searches the cycle that made this memo skipped (for benchmarks, tests)
    # The cycle that made this memo decided nothing: what the next one needs to answer the
    # same without running the phases (core/shortcuts/quiet.py); None when it did decide something.
    quiet: QuietCycle | None = None
    replayed: bool = False  # the cycle that made it was answered from such a record

    def __len__(self) -> int:
        return len(self.failed)
