"""Reclaim's floor (`FloorVeto`, DESIGN §4.1 step 1 and §2 "Hierarchy"): which borrowed units
a reclaim plan may take, given what the plan has already taken from their queues and
departments. A `Veto` for the victim search (core/plan_search.py); the arithmetic of shares
and guarantees is `QueueUsage`'s (core/context.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from caldera.core.snapshot import JobView
from caldera.core.usage import QueueUsage
from caldera.core.victims import (
    Unit,
)
from caldera.model import CRITICAL_PRIORITY, Resources

__all__ = ["FloorVeto"]


class FloorVeto:
    """Reclaim's floor, as Volcano's proportion plugin: a queue may lose a unit while it is
    above its deserved share before that eviction (its last victim may take it below), never
    below its guarantee. Units of the preemptor's own queue pass. Across departments (DESIGN
    §2 "Hierarchy") the same floor holds for the victim's department, and a non-critical
    preemptor takes from another department only while its own department stays within its
    deserved share with the preemptor's gang."""

    def __init__(
        self, usage: Mapping[str, QueueUsage], own: str, job: JobView | None = None
    ) -> None:
        self.usage = usage
        self.own = own
        # Turned a unit away for what was taken from its queue before it: which units join
        # then depends on their order (`SearchCache.order_mattered`, core/shortcuts/searches.py).
        self.order_mattered = False
        entry = usage.get(own)
        self.home: QueueUsage | None = None if entry is None else entry.top
        # May it take from other departments, and from its siblings? A team's preemptor takes
        # across only while its department stays within its share, and from its siblings only
        # while its own queue stays within its own (a critical one asks no share).
        self.across = True
        self.siblings = True
        if entry is not None and entry.parent is not None and job is not None:
            spec = job.spec
            if spec.priority < CRITICAL_PRIORITY:
                gang = spec.gang_request
                self.across = not entry.parent.over_deserved(entry.parent.tree_holds(gang))
                self.siblings = entry.within_deserved(gang)

    def __call__(self, unit: Unit, taken: Mapping[str, Resources]) -> bool:
        queue = unit.queue
        if queue == self.own:
            return True
        entry = self.usage[queue]
        before = entry.kept - taken.get(queue, Resources())
        if entry.may_lose(before, unit.resources) and self._department_lets(entry, unit, taken):
            return True
        if queue in taken or any(child.queue.name in taken for child in entry.top.children):
            self.order_mattered = True
        return False

    def _department_lets(
        self, entry: QueueUsage, unit: Unit, taken: Mapping[str, Resources]
    ) -> bool:
        department = entry.top
        if department is self.home:
            return self.siblings  # a sibling (or, in a flat list, any other queue)
        if not self.across:
            return False
        if department is entry:
            return True  # a top-level queue: its own floor is the department's
        return department.may_lose(_tree_before(department, taken), unit.resources)

    def closed(self, queue: str, taken: Mapping[str, Resources]) -> bool:
        """No longer above its deserved share with what is taken (nor, across departments,
        its department above the department's): more taken never puts it back above."""
        if queue == self.own:
            return False
        entry = self.usage[queue]
        if not entry.over_deserved(entry.kept - taken.get(queue, Resources())):
            return True
        department = entry.top
        if department is self.home or department is entry:
            return False
        return not self.across or not department.over_deserved(_tree_before(department, taken))


def _tree_before(department: QueueUsage, taken: Mapping[str, Resources]) -> Resources:
    """What a department keeps before a plan's next unit: its children's, less what the plan
    has taken from them."""
    before = department.tree_kept()
    for child in department.children:
        gone = taken.get(child.queue.name)
        if gone is not None:
            before = before - gone
    return before
