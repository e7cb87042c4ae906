"""S4's node states, kept across placements: which nodes look alike to nodeorder.

A pod's fit and nodeorder score on a node depend only on the node's state (`node_state`):
its shape, its free cpu, memory and devices, whether it takes another pod, and whether it
has a free slice of the pod's MIG profile. Most nodes of a pool look alike (empty, or full),
so `nodeorder_place` looks at one node per state — the lowest one. Building every node's
state for every pod placed cost half of `volcano-seed001`'s run at 813 nodes; this index
keeps them per room (and profile) and works out again only the nodes whose values changed
since the last look.

Whether anything changed since the last look, the room's change count says (`Room.changes`,
undos included): after the caller's own take, nothing else to do. Which nodes changed, the
room's undo journal says while the scratch of the last look is open and its entries up to
that look are still there: the nodes of the entries after them (an entry undone since gave
back what it took). Otherwise (a scratch ended, or rolled back below the look) the room is
its state outside any scratch plus the open scratch's entries, and the look saw that state
plus its own entries: only the nodes of those two sets of entries changed — unless the room
changed outside a scratch since (`Room.version`: a runtime's starts and ends between cycles).
Then the index compares the pod slots it last saw with the room's, in C: every change moves
them by one, so where they moved, beyond what the entries account for, by as many as were
made, every change shows there; only where they did not (a take and a give on one node) are
the other values (free cpu, memory, devices) compared, whole lists, then element by element.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import compress
from operator import methodcaller, ne

from caldera.core.room import Room, TaskPlacement
from caldera.model import Node

__all__ = ["NodeState", "NodeStates", "node_state", "node_states"]

NodeState = tuple[object, ...]
"""(shape, free cpu, free memory, takes another pod, free devices, has a free slice)."""

Journal = list[tuple[TaskPlacement, int]]
"""A room's undo journal: (task, sign) per change inside a scratch, -1 a take, +1 a give."""

_HOLDS_A_POD = (0).__lt__
"""pods > 0: the node takes another pod."""


def _shape(node: Node) -> tuple[object, ...]:
    """What `fit_on_node` and `nodeorder_score` read of a node that never changes."""
    return (node.cpu, node.memory, node.gpus, node.island_size, node.slices)


def node_state(room: Room, index: int, profile: str | None) -> NodeState:
    """All a pod's fit and nodeorder score on `index` depend on (the one definition)."""
    slices = bool(room.slices[index].get(profile)) if profile is not None else False
    return (
        _shape(room.nodes[index]),
        room.cpu[index],
        room.memory[index],
        _HOLDS_A_POD(room.pods[index]),
        tuple(room.free[index]),
        slices,
    )


class NodeStates:
    """Every node's state in one room for one MIG profile (None: a pod without one), and
    per state its nodes in ascending order.

    States are numbered (`state_of` holds the numbers), so that what a pod of one shape
    found on a state — its fit and score, which depend on nothing else — is kept too
    (`looks`) and looked up by a small int."""

    def __init__(self, room: Room, profile: str | None) -> None:
        self.room = room
        self.profile = profile
        self._cpu = room.cpu.copy()
        self._memory = room.memory.copy()
        self._pods = room.pods.copy()
        self._free = [free.copy() for free in room.free]
        self._slices = self._has_slice()
        self._changes = room.changes
        self._version = room.version
        # Where the room's journal stood at the last look, and the pod slots its entries up
        # to there moved per node (a take moves them by -1): what `refresh` reads.
        self._journal: Journal | None = None
        self._seen = 0
        self._last: tuple[TaskPlacement, int] | None = None
        self._entered: dict[int, int] = {}
        self._numbers: dict[NodeState, int] = {}
        self._looks: dict[tuple[int, int, int], dict[int, int]] = {}
        self.state_of: list[int] = [
            self._number(node_state(room, index, profile)) for index in range(len(room.nodes))
        ]
        self._members: dict[int, list[int]] = {}
        for index, state in enumerate(self.state_of):
            self._members.setdefault(state, []).append(index)
        journal = room.journal
        self._looked(journal)
        self._entered = _pods_moved(journal)

    def _number(self, state: NodeState) -> int:
        """The state's number, a new one for a state not seen before."""
        number = self._numbers.get(state)
        if number is None:
            if len(self._numbers) >= _MAX_STATES:  # a long run: forget the states gone
                self._renumber()
            number = self._numbers.setdefault(state, len(self._numbers))
        return number

    def _renumber(self) -> None:
        """Number again only the states nodes have now; what pods found is forgotten."""
        room = self.room
        states = [node_state(room, index, self.profile) for index in range(len(room.nodes))]
        self._numbers = {}
        self._looks.clear()
        numbers = self._numbers
        self.state_of = [numbers.setdefault(state, len(numbers)) for state in states]
        self._members = {}
        for index, number in enumerate(self.state_of):
            self._members.setdefault(number, []).append(index)

    def looks(self, gpu: int, cpu: int, memory: int) -> dict[int, int]:
        """What a pod asking for `gpu`, `cpu` and `memory` found on each state seen so far:
        its nodeorder score, -1 where it does not fit (the caller fills it in)."""
        key = (gpu, cpu, memory)
        found = self._looks.get(key)
        if found is None:
            found = self._looks[key] = {}
        return found

    def _has_slice(self) -> list[bool] | None:
        """Per node, whether it has a free slice of the profile (None without a profile)."""
        if self.profile is None:
            return None
        return list(map(bool, map(methodcaller("get", self.profile), self.room.slices)))

    def refresh(self) -> None:
        """Bring every node's state up to date with the room."""
        room = self.room
        if room.changes == self._changes:
            return
        journal = room.journal
        seen = self._seen
        if (
            journal is not None
            and journal is self._journal
            and len(journal) >= seen
            and (not seen or journal[seen - 1] is self._last)
        ):
            # Inside the scratch of the last look, whose entries up to it are all still
            # there: every change since is an entry after them, or one undone since (which
            # gave back what it took).
            entered = self._entered
            for task, sign in journal[seen:]:
                index = task.node
                entered[index] = entered.get(index, 0) + sign
                self.touched(index)
        else:
            self._catch_up(journal)
            self._entered = _pods_moved(journal)
        self._looked(journal)

    def _looked(self, journal: Journal | None) -> None:
        """The index is up to date: remember where the room's counts and journal stood."""
        room = self.room
        self._changes = room.changes
        self._version = room.version
        self._journal = journal
        self._seen = 0 if journal is None else len(journal)
        self._last = journal[-1] if journal else None

    def _catch_up(self, journal: Journal | None) -> None:
        """Find the nodes that changed since the last look when the journal alone cannot
        say: a scratch ended since, or entries the last look saw were undone.

        The room is its state outside any scratch plus the open scratch's entries; the last
        look saw that state (then) plus its own scratch's entries up to it (`_entered`), all
        undone since. So only the nodes of those two sets of entries (`suspects`) changed,
        unless something changed outside a scratch since (`Room.version` counts those)."""
        room = self.room
        entered = _pods_moved(journal)
        undone = self._entered
        suspects = entered.keys() | undone.keys()
        outside = room.version - self._version
        pods, seen_pods = room.pods, self._pods
        # Every change outside a scratch moves its node's pod slots by one. Where the slots
        # moved, less what the entries account for, by as many as were made, every one shows
        # there; otherwise (a take and a give on one node) every value is compared.
        visible = 0
        if outside:
            for index in suspects:
                moved = pods[index] - seen_pods[index]
                visible += abs(moved - entered.get(index, 0) + undone.get(index, 0))
        for index in suspects:
            self.touched(index)
        if not outside:
            return
        every = range(len(room.nodes))
        for index in compress(every, map(ne, pods, seen_pods)):
            if index not in suspects:
                visible += abs(pods[index] - seen_pods[index])
                self.touched(index)
        if visible != outside and not self._same():
            changed = set(compress(every, map(ne, room.cpu, self._cpu)))
            changed.update(compress(every, map(ne, room.memory, self._memory)))
            changed.update(compress(every, map(ne, room.free, self._free)))
            changed.update(compress(every, map(ne, pods, seen_pods)))
            slices = self._has_slice()
            if slices is not None and self._slices is not None:
                changed.update(compress(every, map(ne, slices, self._slices)))
            for index in changed:
                self.touched(index)
        # Equal values given back by a rollback are other int objects: the next comparison
        # would compare them one by one. The room's own objects make it an identity check.
        self._pods = room.pods.copy()
        self._cpu = room.cpu.copy()
        self._memory = room.memory.copy()

    def _same(self) -> bool:
        """Whether the room's values are those last seen (list comparisons in C)."""
        room = self.room
        return (
            room.pods == self._pods
            and room.cpu == self._cpu
            and room.memory == self._memory
            and room.free == self._free
            and self._has_slice() == self._slices
        )

    def touched(self, index: int) -> None:
        """The room's values of node `index` may have changed: take them in."""
        room = self.room
        self._cpu[index] = room.cpu[index]
        self._memory[index] = room.memory[index]
        self._pods[index] = room.pods[index]
        self._free[index] = room.free[index].copy()
        if self._slices is not None and self.profile is not None:
            self._slices[index] = bool(room.slices[index].get(self.profile))
        state_of = self.state_of
        before = state_of[index]
        state = self._number(node_state(room, index, self.profile))
        if state == before or self.state_of is not state_of:  # same, or all numbered again
            return
        state_of[index] = state
        members = self._members[before]
        del members[bisect_left(members, index)]
        if not members:
            del self._members[before]
        insort(self._members.setdefault(state, []), index)

    def took(self, index: int) -> None:
        """The caller took one pod's room on node `index`: when that is the room's only
        change since the last look, the index is up to date."""
        self.touched(index)
        if self.room.changes != self._changes + 1:
            return  # other changes too: the next look finds them
        journal = self.room.journal
        if journal is None:
            self._entered = {}
        else:
            if journal is not self._journal:  # a scratch opened since, the last one empty
                self._entered = {}
            self._entered[index] = self._entered.get(index, 0) - 1
        self._looked(journal)

    def lowest_of_each(self) -> list[tuple[int, int]]:
        """Per state, its number and the lowest node that has it."""
        return [(state, members[0]) for state, members in self._members.items()]


def _pods_moved(journal: Journal | None) -> dict[int, int]:
    """Per node, how far the journal's entries moved its pod slots (a take: -1)."""
    moved: dict[int, int] = {}
    for task, sign in journal or ():
        moved[task.node] = moved.get(task.node, 0) + sign
    return moved


_MAX_STATES = 1 << 16
"""States numbered before `NodeStates` numbers again from what the nodes have now."""

_INDEXES: dict[int, tuple[Room, dict[str | None, NodeStates]]] = {}
_MAX_ROOMS = 4  # a cycle's idle and future rooms; more only across simulations


def node_states(room: Room, profile: str | None) -> NodeStates:
    """The room's node states for `profile`, up to date (kept for the last few rooms)."""
    known = _INDEXES.get(id(room))
    if known is None or known[0] is not room:
        if len(_INDEXES) >= _MAX_ROOMS:
            _INDEXES.clear()
        known = _INDEXES[id(room)] = (room, {})
    per_profile = known[1]
    states = per_profile.get(profile)
    if states is None:
        states = per_profile[profile] = NodeStates(room, profile)
    else:
        states.refresh()
    return states
