"""What the running jobs hold, kept from one cycle to the next for the per-pod baselines.

Volcano and kube-scheduler open each cycle by walking every running pod: per queue what is
allocated and asked for, per node the pods there, the room that is free once terminating
pods are gone. A simulated pool runs thousands of pods and a cycle at every event, so those
walks cost the baselines more than caldera's whole cycle. The answers change only where a
running job changed, and the runtime's `JobIndex` replaces a job's view whenever the job
changes (views are frozen), so `RunningLedger.sync` compares the running views with those it
saw last, by identity, and updates its totals for the few that differ. Its `version` (bumped
by every change to a running or releasing job, core/jobindex.py) says when nothing did.

Everything here is what a full walk would find, exactly: sums of integers, pods per node
(consumers order them by keys that end in a unique id), and a room index — a `Room` takes
and gives the same tasks to the same state in any order. tests/baselines/test_ledger.py
checks each against the walk over random simulations.

Jobs the cycle evicted before a phase asks (`gone`) are still running in the snapshot: the
callers leave them out, as the walks did.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import AbstractContextManager

from caldera.core.context import CycleContext
from caldera.core.room import Room, TaskPlacement
from caldera.core.snapshot import JobView, Snapshot
from caldera.core.victims import is_protected
from caldera.model import JobState, Node, Queue

__all__ = ["RunningLedger", "VictimRule", "ledger_for"]

VictimRule = Callable[[JobView], bool]
"""Could this running job's pods be victims? Read only from the view and the queues (the
ledger forgets its answers when the snapshot's queues are another mapping)."""

Totals = list[int]
"""[allocated milli-GPUs, millicores, MiB, wanted milli-GPUs, millicores, MiB, jobs]: what a
queue's running jobs hold (running pods) and want (running and missing pods), and how many
they are (a queue with none has no entry)."""


def _missing(job: JobView) -> int:
    return max(job.spec.tasks - len(job.placement) - len(job.releasing), 0)


class RunningLedger:
    """The running jobs of one `JobIndex`, with what they hold per queue and per node, and a
    room index of the nodes less every running pod (Volcano's FutureIdle before this cycle's
    evictions: terminating pods count as gone)."""

    def __init__(self, token: int, nodes: tuple[Node, ...]) -> None:
        self.token = token
        self.nodes = nodes
        self.version = -1
        self.views: dict[str, JobView] = {}  # job id -> the view counted
        self._counted: dict[int, JobView] = {}  # id(view) -> view, the same views
        self._order: list[int] = []  # their ids, in the index's order of the last sync
        # Running jobs with pods neither running nor terminating (gang-hung or elastic).
        self.missing: dict[str, JobView] = {}
        # Running jobs with tasks inside their grace period.
        self.releasing: dict[str, JobView] = {}
        self.held: dict[str, Totals] = {}  # queue -> Totals
        # node -> job id -> (view, indexes of its running tasks on that node)
        self.on_node: dict[int, dict[str, tuple[JobView, tuple[int, ...]]]] = {}
        # node -> priority -> milli-GPUs of running pods that may ever be victims
        self.victim_gpu: dict[int, dict[int, int]] = {}
        # priority -> node -> milli-GPUs of the pods in `victim_gpu` below that priority,
        # for each priority asked about (kept up to date from then on)
        self._below: dict[int, dict[int, int]] = {}
        # rule key -> (rule, node -> milli-GPUs, node -> pods) of the unprotected pods the
        # rule allows, for each rule asked about (kept up to date from then on)
        self._where: dict[Hashable, tuple[VictimRule, dict[int, int], dict[int, int]]] = {}
        self._queues: Mapping[str, Queue] | None = None
        self.room = Room(nodes)
        self._scratch: AbstractContextManager[Room] | None = None
        self.cycle: CycleContext | None = None  # the cycle it was last caught up for

    # -- keeping up ------------------------------------------------------------------------

    def sync(self, snapshot: Snapshot) -> None:
        """Catch up with the snapshot's running jobs (and end the last cycle's what-ifs).

        Views are told apart by identity (the ledger keeps the views it counted alive, so an
        id is never reused while counted). The index's running jobs keep their order from
        one cycle to the next: a job put again leaves its place and goes to the end, a job
        gone leaves a gap. So the ids in that order are compared with those of the last
        sync, in C, and only where they differ is a view looked at (`_changes`): a cycle
        costs a comparison of two lists of ints, not a set built over every running job."""
        self.release_room()
        if snapshot.queues is not self._queues:
            self._queues = snapshot.queues
            self._where.clear()
        index = snapshot.job_index
        if index.version == self.version:
            return
        running = index.by_state[JobState.RUNNING]
        order = list(map(id, running.values()))
        changes = self._changes(running, order)
        counted = self._counted
        if changes is None:  # a counted view moved, or much changed: compare as sets
            now = set(order)
            gone = [counted[key] for key in counted.keys() - now]
            new = [view for view in running.values() if id(view) not in counted]
        else:
            gone, new = changes
        for old in gone:
            del counted[id(old)]
            del self.views[old.id]
            self._remove(old)
        for view in reversed(new):  # newest first, as the index's end is read
            counted[id(view)] = self.views[view.id] = view
            self._add(view)
        self._order = order
        self.version = index.version

    def _changes(
        self, running: Mapping[str, JobView], order: list[int]
    ) -> tuple[list[JobView], list[JobView]] | None:
        """The counted views no longer running and the running views not counted, found by
        walking the last sync's ids (`_order`) and `order` side by side: where they differ,
        the old view is gone (no longer the running view of its job) or the new one is new.
        None when a counted view sits elsewhere (put again unchanged) or more than
        `_MAX_CHANGES` differ: the caller compares sets then."""
        old = self._order
        counted = self._counted
        gone: list[JobView] = []
        new: list[JobView] = []
        views: list[JobView] | None = None
        i = j = 0
        while True:
            k = _first_difference(order, i, old, j)
            if k is None:
                break
            i += k
            j += k
            was = counted[old[j]]
            if running.get(was.id) is not was:
                gone.append(was)
                j += 1
            elif order[i] not in counted:
                if views is None:
                    views = list(running.values())
                new.append(views[i])
                i += 1
            else:
                return None
            if len(gone) + len(new) > _MAX_CHANGES:
                return None
        step = min(len(order) - i, len(old) - j)
        i += step
        j += step
        for key in old[j:]:
            was = counted[key]
            if running.get(was.id) is was:
                return None
            gone.append(was)
        if i < len(order):
            if views is None:
                views = list(running.values())
            for key, view in zip(order[i:], views[i:], strict=True):
                if key in counted:
                    return None
                new.append(view)
        return gone, new

    def _add(self, job: JobView) -> None:
        self._count(job, 1)
        for task in job.placement:
            self.room.take(task)

    def _remove(self, job: JobView) -> None:
        self._count(job, -1)
        for task in job.placement:
            self.room.give(task)

    def _count(self, job: JobView, sign: int) -> None:
        spec = job.spec
        job_id = job.id
        if sign > 0:
            if _missing(job):
                self.missing[job_id] = job
            if job.releasing:
                self.releasing[job_id] = job
        else:
            self.missing.pop(job_id, None)
            self.releasing.pop(job_id, None)
        running = len(job.placement)
        wanted = (running + _missing(job)) * sign
        running *= sign
        totals = self.held.setdefault(spec.queue, [0, 0, 0, 0, 0, 0, 0])
        totals[0] += spec.gpu * running
        totals[1] += spec.cpu * running
        totals[2] += spec.memory * running
        totals[3] += spec.gpu * wanted
        totals[4] += spec.cpu * wanted
        totals[5] += spec.memory * wanted
        totals[6] += sign
        if not totals[6]:
            del self.held[spec.queue]
        by_node: dict[int, list[int]] = {}
        for i, task in enumerate(job.placement):
            by_node.setdefault(task.node, []).append(i)
        victim = not is_protected(job)
        for node, indexes in by_node.items():
            pods = self.on_node.setdefault(node, {})
            if sign > 0:
                pods[job_id] = (job, tuple(indexes))
            else:
                del pods[job_id]
            if victim:
                gpu = sign * spec.gpu * len(indexes)
                priorities = self.victim_gpu.setdefault(node, {})
                left = priorities.get(spec.priority, 0) + gpu
                if left:
                    priorities[spec.priority] = left
                else:
                    del priorities[spec.priority]
                for priority, below in self._below.items():
                    if spec.priority < priority:
                        left = below.get(node, 0) + gpu
                        if left:
                            below[node] = left
                        else:
                            del below[node]
                for rule, gpus, pods_of in self._where.values():
                    if rule(job):
                        _add_pods(gpus, pods_of, node, gpu, sign * len(indexes))

    # -- reading -----------------------------------------------------------------------------

    def held_without(self, gone: set[str]) -> dict[str, Totals]:
        """`held` as if the jobs in `gone` had stopped: a copy."""
        held = {queue: list(totals) for queue, totals in self.held.items()}
        for job_id in gone:
            job = self.views.get(job_id)
            if job is None:
                continue
            spec = job.spec
            totals = held[spec.queue]
            running = len(job.placement)
            wanted = running + _missing(job)
            totals[0] -= spec.gpu * running
            totals[1] -= spec.cpu * running
            totals[2] -= spec.memory * running
            totals[3] -= spec.gpu * wanted
            totals[4] -= spec.cpu * wanted
            totals[5] -= spec.memory * wanted
            totals[6] -= 1
            if not totals[6]:
                del held[spec.queue]
        return held

    def pods_on(self, node: int) -> Iterator[tuple[JobView, int]]:
        """The running pods on `node`: (job, index in its placement)."""
        for job, indexes in self.on_node.get(node, {}).values():
            for i in indexes:
                yield job, i

    def victims_below(self, priority: int) -> dict[int, int]:
        """node -> milli-GPUs of the running pods there below `priority` that may ever be
        victims (nodes with none left out). Read only: the ledger keeps it up to date."""
        found = self._below.get(priority)
        if found is None:
            found = {}
            for node, by_priority in self.victim_gpu.items():
                gpu = sum(g for p, g in by_priority.items() if p < priority)
                if gpu:
                    found[node] = gpu
            self._below[priority] = found
        return found

    def on_node_of(self, job: JobView) -> list[tuple[int, tuple[JobView, tuple[int, ...]]]]:
        """The nodes a counted job runs pods on, with its entry there, by node."""
        nodes = sorted({task.node for task in job.placement})
        return [(node, self.on_node[node][job.id]) for node in nodes]

    def victims_where(
        self, key: Hashable, rule: VictimRule
    ) -> tuple[dict[int, int], dict[int, int]]:
        """node -> milli-GPUs and node -> pods of the unprotected running pods whose job
        `rule` allows (nodes with none left out); `key` names the rule. Read only."""
        found = self._where.get(key)
        if found is None:
            gpus: dict[int, int] = {}
            pods: dict[int, int] = {}
            for node, jobs in self.on_node.items():
                for job, indexes in jobs.values():
                    if not is_protected(job) and rule(job):
                        _add_pods(gpus, pods, node, job.spec.gpu * len(indexes), len(indexes))
            self._where[key] = found = (rule, gpus, pods)
        return found[1], found[2]

    def leaving(self, snapshot: Snapshot, gone: set[str]) -> list[TaskPlacement]:
        """Tasks whose room is on its way to being free: tasks inside their grace period, and
        the running tasks of the jobs in `gone` (evicted whole earlier in the cycle). Jobs
        that ended while tasks of theirs were still being released stay in the index, in
        their final state, until those are gone: their tasks count too."""
        tasks = [t for state in _LEAVING for job in snapshot.in_state(state) for t in job.releasing]
        for job in self.releasing.values():
            tasks.extend(job.releasing)
        for job_id in gone:
            evicted = self.views.get(job_id)
            if evicted is not None:
                tasks.extend(evicted.placement)
        return tasks

    def future_room(self, gone: set[str]) -> Room:
        """The nodes less every running pod but those of `gone`: a working copy, until the
        next `sync` or `release_room` undoes whatever the cycle did to it."""
        self.release_room()
        self._scratch = self.room.scratch()
        room = self._scratch.__enter__()
        for job_id in gone:
            job = self.views.get(job_id)
            if job is not None:
                for task in job.placement:
                    room.give(task)
        return room

    def release_room(self) -> None:
        """Undo the working copy `future_room` handed out, if any."""
        scratch, self._scratch = self._scratch, None
        if scratch is not None:
            scratch.__exit__(None, None, None)


_LEAVING = tuple(s for s in JobState if s not in (JobState.PENDING, JobState.RUNNING))
"""States whose jobs' releasing tasks the snapshot lists (running jobs' are kept here)."""

_MAX_CHANGES = 64
"""Differences `RunningLedger._changes` walks to before it compares sets instead (each one
costs a comparison of what is left of the two lists)."""


def _first_difference(new: list[int], i: int, old: list[int], j: int) -> int | None:
    """The first k with new[i + k] != old[j + k], None if there is none before either list
    ends. Equal slices are compared in C, halving the stretch that holds the difference."""
    span = min(len(new) - i, len(old) - j)
    if new[i : i + span] == old[j : j + span]:
        return None
    low, high = 0, span  # the first difference lies in [low, high)
    while high - low > 8:
        middle = (low + high) // 2
        if new[i + low : i + middle] == old[j + low : j + middle]:
            low = middle
        else:
            high = middle
    for k in range(low, high):
        if new[i + k] != old[j + k]:
            return k
    raise AssertionError("unreachable: the slices differ")


def _add_pods(gpus: dict[int, int], pods: dict[int, int], node: int, gpu: int, count: int) -> None:
    """Pods (`count` < 0: gone) holding `gpu` milli-GPUs on `node`; a node without pods goes."""
    left = pods.get(node, 0) + count
    if left:
        pods[node] = left
        gpus[node] = gpus.get(node, 0) + gpu
    else:
        del pods[node]
        del gpus[node]


_LEDGER: list[RunningLedger] = []


def ledger_for(cycle: CycleContext) -> RunningLedger:
    """The ledger of the cycle's job index, caught up with its snapshot when a new cycle
    first asks (the last cycle's working copy of the future room undone then). One is kept
    (one simulation at a time is the common case); another index starts a new one."""
    snapshot = cycle.snapshot
    index = snapshot.job_index
    ledger = _LEDGER[0] if _LEDGER else None
    if ledger is not None and ledger.cycle is cycle:
        return ledger
    if ledger is None or ledger.token != index.token or ledger.nodes is not snapshot.nodes:
        if ledger is not None:
            ledger.release_room()
        ledger = RunningLedger(index.token, snapshot.nodes)
        _LEDGER[:] = [ledger]
    ledger.sync(snapshot)
    ledger.cycle = cycle
    return ledger
