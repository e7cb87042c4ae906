"""The free-room index: what every node, NVLink island and topology domain has left.

The cycle asks "where does this task fit?" tens of thousands of times, so free room is kept
in indexes that answer fast: per node the free milli-GPUs of each device, CPU and memory;
nodes bucketed by how many whole free GPUs they have (per GPU model), and whole free GPUs
counted per tier-1 and tier-2 domain. MIG slices (the devices after a node's whole GPUs) are
all or nothing — free at their GPU-equivalent, or 0 — and indexed per node and profile.

Every change can be journaled. `scratch()` opens a journal and rolls all changes back on exit,
which is how the cycle tries gangs and victim sets on a working copy and still leaves the
snapshot as it found it (Volcano's Statement, Kueue's undo function).

`version` counts the changes made outside `scratch()` — the runtime's own starts and releases
— and `token` tells one room from another, so a cycle can tell whether free room changed
since an earlier cycle without comparing it (core/shortcuts/memo.py). `changes` counts every
change, undos included, for caches outside the core that must know whether anything moved
since they last looked (baselines/volcano/nodestates.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import count

from caldera.errors import CapacityError
from caldera.model import GPU_MILLI, Node, slice_milli

__all__ = ["CapacityError", "Room", "TaskPlacement"]

_TOKENS = count(1)
_NO_LIMIT = 1 << 30  # free pod slots of a node without a pod limit: never the binding one

DomainLayout = dict[int, tuple[tuple[int, ...], int]]
"""Topology domain -> (its usable nodes, their GPU capacity in milli-GPUs)."""


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """Where one task runs: a node, the devices it uses there and how much of each.

    `milli` is per device: 1000 for whole GPUs, less for a share of one device, 0 for a task
    that uses no GPU. A task on a MIG slice has that one device and the slice's GPU-equivalent.
    """

    node: int
    devices: tuple[int, ...]
    milli: int
    cpu: int = 0
    memory: int = 0

    @property
    def gpu(self) -> int:
        return self.milli * len(self.devices)


class Room:
    """Free room with indexes and an undo journal. Mutated only through take/give."""

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        self.nodes = nodes
        self.milli_of: dict[str, int] = {
            p: slice_milli(p) for p in sorted({p for n in nodes for p in n.slices})
        }
        self.free: list[list[int]] = [
            [GPU_MILLI] * n.gpus + [self.milli_of[p] for p in n.slices] for n in nodes
        ]
        self.whole: list[int] = [n.gpus for n in nodes]
        self.cpu: list[int] = [n.cpu for n in nodes]
        self.memory: list[int] = [n.memory for n in nodes]
        # Tasks each node may still take (one pod each; a node without a limit: _NO_LIMIT).
        self.pods: list[int] = [n.pods if n.pods > 0 else _NO_LIMIT for n in nodes]
        self.max_gpus = max((n.gpus for n in nodes), default=0)
        self.models: tuple[str, ...] = tuple(sorted({n.gpu_model for n in nodes}))
        # buckets[model][k]: nodes of that model with exactly k whole free GPUs, as sorted
        # lists: iteration order depends only on the room, never on how it got there, so the
        # same snapshot always gives the same placements (even after a rollback).
        self.buckets: dict[str, list[list[int]]] = {
            m: [[] for _ in range(self.max_gpus + 1)] for m in self.models
        }
        # Nodes with at least one partly used device: where GPU shares binpack first.
        self.partial: dict[str, list[int]] = {m: [] for m in self.models}
        self._partial: set[int] = set()
        self.tier1_nodes: dict[int, list[int]] = {}
        self.tier2_nodes: dict[int, list[int]] = {}
        self.tier1_whole: dict[int, int] = {}
        self.tier2_whole: dict[int, int] = {}
        self.model_whole: dict[str, int] = dict.fromkeys(self.models, 0)
        self.capacity_gpus = sum(n.gpus for n in nodes)
        # MIG slices: per node and profile the free slice devices (sorted), per profile the
        # free count and the nodes that have any; capacity counts them by GPU-equivalent.
        self.slices: list[dict[str, list[int]]] = [{} for _ in nodes]
        self.profile_free: dict[str, int] = dict.fromkeys(self.milli_of, 0)
        self.profile_nodes: dict[str, list[int]] = {p: [] for p in self.milli_of}
        self.capacity_milli = self.capacity_gpus * GPU_MILLI
        for n in nodes:
            for k, profile in enumerate(n.slices):
                self.slices[n.index].setdefault(profile, []).append(n.gpus + k)
                self.profile_free[profile] += 1
                self.capacity_milli += self.milli_of[profile]
            for profile in self.slices[n.index]:
                self.profile_nodes[profile].append(n.index)
        for n in nodes:
            self.buckets[n.gpu_model][n.gpus].append(n.index)
            self.tier1_nodes.setdefault(n.tier1, []).append(n.index)
            self.tier2_nodes.setdefault(n.tier2, []).append(n.index)
            self.tier1_whole[n.tier1] = self.tier1_whole.get(n.tier1, 0) + n.gpus
            self.tier2_whole[n.tier2] = self.tier2_whole.get(n.tier2, 0) + n.gpus
            self.model_whole[n.gpu_model] += n.gpus
        self._journal: list[tuple[TaskPlacement, int]] | None = None
        self._layouts: dict[tuple[int, frozenset[str] | None], DomainLayout] = {}
        self.token = next(_TOKENS)
        self.version = 0  # changes made outside scratch(): a runtime's starts and releases
        self.changes = 0  # every change and every undo: an unchanged count, an unchanged room

    @property
    def journal(self) -> list[tuple[TaskPlacement, int]] | None:
        """The open scratch's undo journal (None outside a scratch): every change made in it
        and not undone, in order. Read only: an observer learns from it which nodes changed
        without comparing every node (the Volcano baseline's node states)."""
        return self._journal

    def domain_layout(self, tier: int, models: frozenset[str] | None) -> DomainLayout:
        """Per domain of `tier` (1 or 2): its nodes of the allowed GPU models and their
        capacity in milli-GPUs. The nodes never change, so this is worked out once."""
        key = (1 if tier <= 1 else 2, models)
        layout = self._layouts.get(key)
        if layout is None:
            domains = self.tier1_nodes if tier <= 1 else self.tier2_nodes
            layout = {}
            for domain, nodes in domains.items():
                usable = tuple(
                    n for n in nodes if models is None or self.nodes[n].gpu_model in models
                )
                layout[domain] = (usable, sum(self.nodes[n].gpus for n in usable) * GPU_MILLI)
            self._layouts[key] = layout
        return layout

    # -- changes ----------------------------------------------------------------------------

    def take(self, task: TaskPlacement) -> None:
        """Mark the task's devices, CPU and memory as used."""
        self._change(task, -1)
        if self._journal is None:
            self.version += 1

    def give(self, task: TaskPlacement) -> None:
        """Return the task's room."""
        self._change(task, 1)
        if self._journal is None:
            self.version += 1

    def can_take(self, task: TaskPlacement) -> bool:
        """Would `take(task)` succeed?"""
        free = self.free[task.node]
        node = self.nodes[task.node]
        if node.slices and any(d >= node.gpus for d in task.devices):
            return (
                self._slice_ok(task, node)
                and free[task.devices[0]] == task.milli
                and self.cpu[task.node] >= task.cpu
                and self.memory[task.node] >= task.memory
                and self.pods[task.node] >= 1
            )
        return (
            len(set(task.devices)) == len(task.devices)
            and all(0 <= d < len(free) and free[d] >= task.milli for d in task.devices)
            and self.cpu[task.node] >= task.cpu
            and self.memory[task.node] >= task.memory
            and self.pods[task.node] >= 1
        )

    def take_all(self, tasks: Iterable[TaskPlacement]) -> bool:
        """Take every task, or — if one does not fit — none of them. Runtimes apply a start
        with this: whatever a decision says, no GPU is ever given twice."""
        taken: list[TaskPlacement] = []
        for task in tasks:
            if not self.can_take(task):
                for given in reversed(taken):
                    self.give(given)
                return False
            self.take(task)
            taken.append(task)
        return True

    def _change(self, task: TaskPlacement, sign: int) -> None:
        """Apply a take (-1) or give (+1). Checked in full before anything changes, so a
        refused change leaves the room as it was."""
        index = task.node
        node = self.nodes[index]
        if node.slices and any(d >= node.gpus for d in task.devices):
            self._change_slice(task, sign, node)
            return
        free = self.free[index]
        delta = sign * task.milli
        cpu = self.cpu[index] + sign * task.cpu
        memory = self.memory[index] + sign * task.memory
        if cpu < 0 or memory < 0 or cpu > node.cpu or memory > node.memory:
            raise CapacityError(f"node {node.name}: cpu/memory out of range")
        if self.pods[index] + sign < 0:
            raise CapacityError(f"node {node.name}: no room for another pod")
        devices = task.devices
        for device in devices:
            after = free[device] + delta
            if after < 0 or after > GPU_MILLI:
                raise CapacityError(
                    f"node {node.name} device {device}: {free[device]} milli free, change {delta}"
                )
        if len(devices) > 1 and len(set(devices)) != len(devices):
            raise CapacityError(f"node {node.name}: a task lists a device twice")
        self._apply(task, sign, node)
        if self._journal is not None:
            self._journal.append((task, sign))

    def _apply(self, task: TaskPlacement, sign: int, node: Node) -> None:
        """The unchecked part of a whole-GPU or shared change: the caller checked it (a
        take or give), or it undoes one that was (a rollback)."""
        index = task.node
        self.changes += 1
        free = self.free[index]
        delta = sign * task.milli
        whole_before = self.whole[index]
        whole = whole_before
        for device in task.devices:
            before = free[device]
            after = before + delta
            free[device] = after
            if before == GPU_MILLI:
                whole -= 1
            if after == GPU_MILLI:
                whole += 1
        self.cpu[index] += sign * task.cpu
        self.memory[index] += sign * task.memory
        self.pods[index] += sign
        if whole != whole_before:
            buckets = self.buckets[node.gpu_model]
            bucket = buckets[whole_before]
            del bucket[bisect_left(bucket, index)]
            insort(buckets[whole], index)
            self.whole[index] = whole
            change = whole - whole_before
            self.tier1_whole[node.tier1] += change
            self.tier2_whole[node.tier2] += change
            self.model_whole[node.gpu_model] += change
        if 0 < task.milli < GPU_MILLI:
            devices = free[: node.gpus] if node.slices else free
            shared = any(0 < f < GPU_MILLI for f in devices)
            if shared != (index in self._partial):
                partial = self.partial[node.gpu_model]
                if shared:
                    self._partial.add(index)
                    insort(partial, index)
                else:
                    self._partial.discard(index)
                    del partial[bisect_left(partial, index)]

    def _slice_ok(self, task: TaskPlacement, node: Node) -> bool:
        """A task on a MIG slice takes exactly that one slice, at its GPU-equivalent."""
        if len(task.devices) != 1 or not node.gpus <= task.devices[0] < node.devices:
            return False
        profile = node.slices[task.devices[0] - node.gpus]
        return task.milli == self.milli_of[profile]

    def _change_slice(self, task: TaskPlacement, sign: int, node: Node) -> None:
        """Take (-1) or give (+1) one MIG slice: all of it, checked before anything changes."""
        index = task.node
        if not self._slice_ok(task, node):
            raise CapacityError(f"node {node.name}: {task} is not one whole MIG slice")
        device = task.devices[0]
        free = self.free[index]
        after = free[device] + sign * task.milli
        cpu = self.cpu[index] + sign * task.cpu
        memory = self.memory[index] + sign * task.memory
        if after not in (0, task.milli) or cpu < 0 or memory < 0:
            raise CapacityError(f"node {node.name} slice {device}: taken twice or given twice")
        if cpu > node.cpu or memory > node.memory:
            raise CapacityError(f"node {node.name}: cpu/memory out of range")
        if self.pods[index] + sign < 0:
            raise CapacityError(f"node {node.name}: no room for another pod")
        self.changes += 1
        free[device] = after
        self.cpu[index] = cpu
        self.memory[index] = memory
        self.pods[index] += sign
        profile = node.slices[device - node.gpus]
        free_slices = self.slices[index][profile]
        if sign < 0:
            del free_slices[bisect_left(free_slices, device)]
        else:
            insort(free_slices, device)
        self.profile_free[profile] += sign
        if self._journal is not None:
            self._journal.append((task, sign))

    # -- what-if ----------------------------------------------------------------------------

    def mark(self) -> int:
        """A point to roll back to; only valid inside `scratch()`."""
        if self._journal is None:
            raise RuntimeError("Room.mark() outside scratch()")
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        """Undo every change made since `mark`, newest first."""
        journal = self._journal
        if journal is None:
            raise RuntimeError("Room.rollback() outside scratch()")
        self._journal = None
        nodes = self.nodes
        try:
            while len(journal) > mark:
                task, sign = journal.pop()
                node = nodes[task.node]
                if node.slices and any(d >= node.gpus for d in task.devices):
                    self._change(task, -sign)
                else:  # undoes a checked change: nothing to check again
                    self._apply(task, -sign, node)
        finally:
            self._journal = journal

    @contextmanager
    def scratch(self) -> Iterator[Room]:
        """A working copy: every change inside is undone when the block exits."""
        if self._journal is not None:
            raise RuntimeError("Room.scratch() is not reentrant")
        self._journal = []
        try:
            yield self
        finally:
            self.rollback(0)
            self._journal = None

    # -- reading ----------------------------------------------------------------------------

    def free_whole(self, models: frozenset[str] | None = None) -> int:
        if models is None:
            return sum(self.model_whole.values())
        return sum(self.model_whole.get(m, 0) for m in models)

    def free_milli(self, index: int) -> int:
        """Free milli-GPUs on the node's whole GPUs (MIG slices are not shareable room)."""
        node = self.nodes[index]
        return sum(self.free[index][: node.gpus] if node.slices else self.free[index])

    def free_slices(
        self,
        profile: str,
        nodes: Iterable[int] | None = None,
        models: frozenset[str] | None = None,
    ) -> int:
        """Free MIG slices of `profile` (on `nodes`, of `models`; None: anywhere)."""
        if nodes is None and models is None:
            return self.profile_free.get(profile, 0)
        wanted = None if nodes is None else set(nodes)
        return sum(
            len(self.slices[i].get(profile, ()))
            for i in self.profile_nodes.get(profile, ())
            if (wanted is None or i in wanted)
            and (models is None or self.nodes[i].gpu_model in models)
        )

    def fingerprint(self) -> tuple[object, ...]:
        """Everything the room holds, for tests that check nothing changed."""
        return (
            tuple(tuple(f) for f in self.free),
            tuple(self.cpu),
            tuple(self.memory),
            tuple(self.pods),
            tuple(self.whole),
            tuple(sorted(self.tier1_whole.items())),
            tuple(sorted(self.tier2_whole.items())),
            tuple((m, tuple(tuple(b) for b in bs)) for m, bs in self.buckets.items()),
            tuple((m, tuple(p)) for m, p in self.partial.items()),
            tuple(tuple((p, tuple(d)) for p, d in sorted(n.items())) for n in self.slices),
            tuple(sorted(self.profile_free.items())),
        )
