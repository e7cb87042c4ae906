"""A queue's quotas and what it holds during one cycle (`QueueUsage`, DESIGN §2): its deserved
share, guarantee and capability against what runs, is leaving, was started or promised in the
cycle — and, for the queue tree ("Hierarchy"), the department-level arithmetic in one place.
The cycle context keeps one per queue (`CycleContext.usage`) and updates it with every start,
eviction and promise; the phases and the victim search ask it what a queue may take or lose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from caldera.model import (
    Queue,
    Resources,
)

if TYPE_CHECKING:
    pass

__all__ = ["NOTHING", "QueueUsage"]


NOTHING = Resources()


@dataclass(slots=True)
class QueueUsage:
    """A queue's quotas and what it holds during this cycle (running + releasing + started)."""

    queue: Queue
    deserved: Resources
    # Resources are immutable: one shared zero serves every default (a cycle makes a usage
    # per queue, and the quiet check's searches a cycle of their own).
    allocated: Resources = NOTHING
    releasing: Resources = NOTHING  # of `allocated`, signalled to leave
    held_at_start: Resources = NOTHING  # when the cycle began
    promised: Resources = NOTHING  # room nominated to preemptors
    # Of `allocated - releasing`, what victims a live plan has yet to signal will give back:
    # committed to leave, so no later plan counts it as the queue's.
    committed: Resources = NOTHING
    # The tree (DESIGN §2 "Hierarchy"): the department above this queue (None: top level)
    # and a department's teams (empty: not a department). A department holds no jobs: what
    # it holds is its children's sum (`tree_kept`, `tree_holds`). Linked by CycleContext.
    parent: QueueUsage | None = None
    children: tuple[QueueUsage, ...] = ()

    @property
    def share(self) -> float:
        """allocated / deserved, the larger over the resources that have a deserved value."""
        if self.deserved.gpu > 0:
            share = self.allocated.gpu / self.deserved.gpu
        else:  # GPUs always have a deserved value; nothing deserved, anything held: last
            share = float("inf") if self.allocated.gpu > 0 else 0.0
        if self.deserved.cpu > 0:
            share = max(share, self.allocated.cpu / self.deserved.cpu)
        if self.deserved.memory > 0:
            share = max(share, self.allocated.memory / self.deserved.memory)
        return share

    @property
    def kept(self) -> Resources:
        """What the queue keeps once everything signalled, or committed to a live plan, has
        left, not counting jobs started in this cycle: room is not taken back from one job to
        start another."""
        kept = self.held_at_start
        # Most queues have nothing leaving: no new Resources then (asked for every queue
        # whenever a usage changes, and for every borrower a reclaim search looks at).
        if self.releasing is not NOTHING:
            kept = kept - self.releasing
        if self.committed is not NOTHING:
            kept = kept - self.committed
        return kept

    def holds(self, extra: Resources) -> Resources:
        """What the queue will hold once `extra` starts: everything running or started this
        cycle, plus the room promised to its preemptors, less what is leaving."""
        return self.allocated - self.releasing + self.promised + extra

    def over_deserved(self, held: Resources) -> bool:
        """Is `held` above the deserved share in some resource that has a deserved value?
        (GPUs always have one; CPU and memory when the queue sets them.)"""
        deserved = self.deserved
        return (
            held.gpu > deserved.gpu
            or 0 < deserved.cpu < held.cpu
            or 0 < deserved.memory < held.memory
        )

    def below_guarantee(self, held: Resources) -> bool:
        """Would `held` take the queue below its guarantee in some resource?"""
        guarantee = self.queue.guarantee
        if guarantee is None:
            return False
        return (
            held.gpu < guarantee.gpu or held.cpu < guarantee.cpu or held.memory < guarantee.memory
        )

    def within_deserved(self, extra: Resources) -> bool:
        """`not over_deserved(holds(extra))`, in plain integers: asked for every waiting group
        in preempt and again in reclaim, every cycle (reclaim.may_reclaim), where building
        three Resources per call was a fifth of a quiet cycle's time."""
        a, r, p, d = self.allocated, self.releasing, self.promised, self.deserved
        return not (
            a.gpu - r.gpu + p.gpu + extra.gpu > d.gpu
            or 0 < d.cpu < a.cpu - r.cpu + p.cpu + extra.cpu
            or 0 < d.memory < a.memory - r.memory + p.memory + extra.memory
        )

    def within_capability(self, extra: Resources) -> bool:
        """Would `extra` keep the queue within its cap, and its department within the
        department's, counting room promised to nominated preemptors (they will start on it)?"""
        capability = self.queue.capability
        if capability is not None and not (self.allocated + self.promised + extra).fits_in(
            capability
        ):
            return False
        parent = self.parent
        if parent is None or parent.queue.capability is None:
            return True
        return parent.tree_capped(extra).fits_in(parent.queue.capability)

    # -- the tree (DESIGN §2 "Hierarchy"): one place for the department-level arithmetic --

    @property
    def top(self) -> QueueUsage:
        """The queue's department, or the queue itself at the top level (a flat list of
        queues is a one-level tree: every queue is its own department)."""
        parent = self.parent
        return self if parent is None else parent

    def tree_kept(self) -> Resources:
        """`kept`, summed over a department's children (a team's own)."""
        if not self.children:
            return self.kept
        total = NOTHING
        for child in self.children:
            total = total + child.kept
        return total

    def tree_holds(self, extra: Resources) -> Resources:
        """`holds(extra)`, summed over a department's children (a team's own)."""
        if not self.children:
            return self.holds(extra)
        total = extra
        for child in self.children:
            total = total + child.holds(NOTHING)
        return total

    def tree_capped(self, extra: Resources) -> Resources:
        """What counts against a department's capability once `extra` starts in it."""
        total = extra
        for child in self.children:
            total = total + child.allocated + child.promised
        return total

    @property
    def tree_share(self) -> float:
        """The share of the queue's department (its own share at the top level): allocate
        serves the queues of the departments lowest against their deserved share first, so
        a department's idle room goes to its own teams before it is lent across."""
        top = self.top
        if top is self:
            return self.share
        held = NOTHING
        for child in top.children:
            held = held + child.allocated
        return QueueUsage(top.queue, top.deserved, held).share

    def may_take_back(self, gang: Resources) -> bool:
        """May a preemptor of this queue with `gang` reclaim (DESIGN §4.1 step 1, §2
        "Hierarchy")? Its queue stays within its deserved share once it starts — or, for a
        team, its department stays within the department's: a department's lent room comes
        home to any of its teams (then from other departments only: `FloorVeto`)."""
        if self.within_deserved(gang):
            return True
        parent = self.parent
        return parent is not None and not parent.over_deserved(parent.tree_holds(gang))

    def may_lose(self, before: Resources, lost: Resources) -> bool:
        """Reclaim's floor at one level (Volcano's proportion plugin): a queue or department
        holding `before` may lose `lost` while above its deserved share, never going below
        its guarantee (so its last victim may take it below its share)."""
        return self.over_deserved(before) and not self.below_guarantee(before - lost)

    def lends_to(self, taker: QueueUsage, critical: bool = False) -> bool:
        """May a preemptor of `taker` take room back from this queue, given the departments?
        (Whether this queue itself is above its share is the caller's check.) Siblings, and
        any two queues of a flat list, lend to each other freely; across departments, the
        lender's department must be above its deserved share and the taker's at or below
        its own — a critical taker asks no share (DESIGN §4.1) — so lent room comes home top
        down, and one department never takes from another that is not over its share."""
        mine, theirs = self.top, taker.top
        if mine is theirs:
            return True
        if mine is not self and not mine.over_deserved(mine.tree_kept()):
            return False
        return critical or theirs is taker or not theirs.over_deserved(theirs.tree_holds(NOTHING))
