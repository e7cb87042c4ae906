"""The cycle's search cache (`CycleContext.caches.searches`): the victim searches a cycle
need not run, and what it hands on about them. It decides nothing: with or without it, every search
answers the same (tests/sim/test_memo.py).

- `failed`: failed searches still settled — the last cycle's (`Snapshot.memo`, kept while
  its stamp holds and until each entry's `until`) and those this cycle adds
  (`record_failure`, until time could loosen the search's rules: memo.py, 4); handed on as
  `Decisions.memo` (`memo()`), with the searches they saved (`hits`). A failure is taken
  (`known_failure`) only while the cycle has decided nothing: a start before the search may
  have freed reserved room or put a queue above its share.
- `known`: the searches a quiet check ran on this same snapshot before the phases
  (quiet.py, 5), taken in order while the cycle has decided nothing (`known_search`); a
  quiet check keeps its own in `log` and, with `until_decided`, stops at its first decision.
- `order_mattered`: a search since the flag was last cleared failed only after a veto turned
  a candidate away for what earlier candidates of its queue took. The candidates' order,
  which time alone changes (their lost work and weights), may then decide it, so its failure
  is not settled (give_way clears and reads it around each planner call).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from caldera.core.config import PolicyConfig
from caldera.core.estimates import starving_from
from caldera.core.shortcuts.memo import FailedSearch, SearchKey, SearchMemo, Stamp
from caldera.core.snapshot import JobView, Snapshot
from caldera.model import CRITICAL_PRIORITY

if TYPE_CHECKING:
    from caldera.core.victims import Plan

__all__ = ["DEADLINE_WAKES", "Handover", "KnownSearch", "SearchCache", "exact_for"]

DEADLINE_WAKES = "deadline wakes"
"""The cycle memo of reclaim's wake-ups at a preemptor's SLO end: job id -> time
(reclaim._wake_when_slo_runs_out), kept with a failed search (`FailedSearch.wake`)."""

KnownSearch = tuple[str, int, "Plan | None", bool]
"""A victim search already run on a cycle's state: (preemptor, its pool's units, the plan,
whether a failure may depend on the candidates' order: `SearchCache.order_mattered`)."""


@dataclass(frozen=True)
class Handover:
    """What a quiet check that found a plan hands to the phases, which then run on the same
    snapshot (core/shortcuts/quiet.py, 5): its victim searches, in order, and its per-cycle
    values that are functions of the snapshot alone (`memo`, by name: each running job's
    weight and victim units at the cycle's time)."""

    searches: list[KnownSearch]
    memo: Mapping[str, object]


def exact_for(config: PolicyConfig) -> bool:
    """Whether the memo's stamps cover everything a search reads under `config`.
    `pack_with_victims` (core/defrag.py; off by default) defers and steers starts by which
    leaves hold never-evicted work, which the stamps do not record: with it on no failed
    search is reused and no quiet cycle is answered from a record (found by
    tests/sim/test_memo.py: a deferred critical start differed with and without the memo)."""
    return not config.pack_with_victims


@dataclass(slots=True, init=False)
class SearchCache:
    """One cycle's search cache (the module docstring). Built by hand, as `CycleContext`."""

    snapshot: Snapshot
    stamp: Stamp  # the state the failures hold for
    failed: dict[SearchKey, FailedSearch]
    hits: int  # searches a settled failure saved
    known: list[KnownSearch]
    log: list[KnownSearch] | None
    until_decided: bool
    order_mattered: bool
    _settled_until: float | None  # the earliest cooldown end or window edge (`_until`)

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.stamp = Stamp.of(
            snapshot.free_room,
            snapshot.job_index,
            snapshot.config,
            snapshot.queues,
            snapshot.nodes,
        )
        memo = snapshot.memo
        self.failed = {}
        if memo is not None and exact_for(snapshot.config) and memo.stamp.holds_for(self.stamp):
            now = snapshot.now
            self.failed = {key: f for key, f in memo.failed.items() if now < f.until}
        self.hits = 0
        self.known = []
        self.log = None
        self.until_decided = False
        self.order_mattered = False
        self._settled_until = None

    def memo(self) -> SearchMemo:
        """What the next cycle may reuse (`Decisions.memo`)."""
        return SearchMemo(self.stamp, MappingProxyType(self.failed), self.hits)

    def known_search(
        self, job: JobView, units: int, undecided: bool
    ) -> tuple[bool, Plan | None, bool]:
        """(True, its plan, whether the order mattered) when this search is the next a quiet
        check ran on this state (`undecided`: the cycle has decided nothing yet)."""
        known = self.known
        if not known or not undecided:
            return False, None, False
        preemptor, size, plan, order_mattered = known[0]
        if preemptor != job.id or size != units:  # not the same search: forget them all
            known.clear()
            return False, None, False
        del known[0]
        return True, plan, order_mattered

    def log_search(
        self, job: JobView, units: int, plan: Plan | None, order: bool, undecided: bool
    ) -> None:
        """Keep a search run while the cycle has decided nothing (for `known`)."""
        if self.log is not None and undecided:
            self.log.append((job.id, units, plan, order))

    def known_failure(
        self, key: SearchKey, head: JobView, undecided: bool, wakeups: list[float]
    ) -> bool:
        """Did this search fail in an earlier cycle, with nothing since that could change
        its answer (core/shortcuts/memo.py)? Never once the cycle has decided something
        (`undecided` false). A hit asks again for the wake-up its search asked for."""
        if not undecided:
            return False
        failed = self.failed.get(key)
        now = self.snapshot.now
        if failed is not None and failed.head == head.id and now < failed.until:
            self.hits += 1
            if failed.wake is not None and failed.wake > now:
                wakeups.append(failed.wake)
            return True
        return False

    def record_failure(self, key: SearchKey, head: JobView, wakes: Mapping[str, float]) -> None:
        """Remember a failed search until time could loosen its rules (core/shortcuts/
        memo.py, 4); `wakes`: reclaim's wake-ups at a preemptor's SLO end (DEADLINE_WAKES)."""
        snapshot = self.snapshot
        now, config = snapshot.now, snapshot.config
        until = self._until()
        spec = head.spec
        if spec.priority >= CRITICAL_PRIORITY:
            slo = config.slo.get(spec.type.value)
            if slo is not None and spec.submit + slo >= now:
                until = min(until, spec.submit + slo)
        else:
            # Its SLO running out: reclaim no longer waits for borrowers at the ceiling.
            slo = config.slo.get(spec.type.value)
            if slo is not None and spec.submit + slo >= now:
                until = min(until, math.nextafter(spec.submit + slo, math.inf))
            if config.lossy_patience > 0:
                ends = spec.submit + config.lossy_patience
                if ends > now:
                    until = min(until, ends)
        starves = starving_from(spec, config)  # then it searches with its reserved room
        if starves is not None and starves > now:
            until = min(until, starves)
        if until > now:
            wake = wakes.get(head.id) if key[0] == "reclaim" else None
            self.failed[key] = FailedSearch(head.id, until, wake)

    def _until(self) -> float:
        """The earliest of the next cooldown end and window edge, once per cycle."""
        until = self._settled_until
        if until is None:
            until = self._settled_until = min(self._next_cooldown_end(), self._next_window_edge())
        return until

    def _next_cooldown_end(self) -> float:
        """When the next running job leaves its cooldown and may be a victim again."""
        snapshot = self.snapshot
        return snapshot.job_index.next_cooldown_end(snapshot.config.cooldown, snapshot.now)

    def _next_window_edge(self) -> float:
        """When some queue's time window next opens or closes. A window that closes takes
        its queue's pending jobs out of the cycle — with the room a starving one of them had
        reserved (reservation.py) — and that room may let a waiting group's search succeed
        with nothing else changed (the memo property found it: a large job's plan appeared
        at the edge, still memoised as failed)."""
        snapshot = self.snapshot
        now, offset = snapshot.now, snapshot.config.week_offset
        edges = [
            edge - offset
            for queue in snapshot.queues.values()
            if (edge := queue.next_window_edge(now + offset)) is not None
        ]
        return min(edges, default=math.inf)
