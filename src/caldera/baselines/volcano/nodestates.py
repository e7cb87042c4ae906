"""S4's node states, kept across placements: which nodes look alike to nodeorder.

A pod's fit and nodeorder score on a node depend only on the node's state (`node_state`):
its shape, its free cpu, memory and devices, whether it takes another pod, and whether it
has a free slice of the pod's MIG profile. Most nodes of a pool look alike (empty, or full),
so `nodeorder_place` looks at one node per state — the lowest one. Building every node's
state for every pod placed cost half of `volcano-seed001`'s run at 813 nodes; this index
keeps them per room (and profile) and works out again only the nodes whose values changed
since the last look.

Whether anything changed since the last look, the room's change count says (`Room.changes`,
undos included): after the caller's own take, nothing else to do. Which nodes changed is found
without more help from the room: the index keeps a copy of the values it last saw (free cpu,
memory, pod slots, devices) and compares them with the room's in C — the pod slots first,
since every take and give moves them by one; only where they moved by fewer than the room's
change count says (a take and a give on one node), whole lists, then element by element
where they differ. Rollbacks, evictions and a runtime's starts between cycles are all seen the
same way.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from itertools import compress
from operator import methodcaller, ne

from caldera.core.room import Room
from caldera.model import Node

__all__ = ["NodeState", "NodeStates", "node_state", "node_states"]

NodeState = tuple[object, ...]
"""(shape, free cpu, free memory, takes another pod, free devices, has a free slice)."""

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
        self._numbers: dict[NodeState, int] = {}
        self._looks: dict[tuple[int, int, int], dict[int, int]] = {}
        self.state_of: list[int] = [
            self._number(node_state(room, index, profile)) for index in range(len(room.nodes))
        ]
        self._members: dict[int, list[int]] = {}
        for index, state in enumerate(self.state_of):
            self._members.setdefault(state, []).append(index)

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
        changes = room.changes - self._changes
        if not changes:
            return
        self._changes = room.changes
        # Every take and give moves its node's pod slots by one and counts once in
        # `Room.changes`: those nodes first. Where the slots moved by as many as were
        # counted, every change shows there and nothing else changed; otherwise (a take and
        # a give on one node, values given back) every value is compared.
        every = range(len(room.nodes))
        moved = list(compress(every, map(ne, room.pods, self._pods)))
        if not moved and self._same():
            return
        shifted = sum(abs(room.pods[index] - self._pods[index]) for index in moved)
        for index in moved:
            self.touched(index)
        if shifted != changes and not self._same():
            changed = set(compress(every, map(ne, room.cpu, self._cpu)))
            changed.update(compress(every, map(ne, room.memory, self._memory)))
            changed.update(compress(every, map(ne, room.free, self._free)))
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
        """The caller took one pod's room on node `index`, the room's only change since the
        last look: the next look need not compare."""
        self.touched(index)
        if self.room.changes == self._changes + 1:
            self._changes += 1

    def lowest_of_each(self) -> list[tuple[int, int]]:
        """Per state, its number and the lowest node that has it."""
        return [(state, members[0]) for state, members in self._members.items()]


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
