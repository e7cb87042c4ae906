"""What the dashboard shows, as plain values: built from the store's rows and events and from
the runtime's live state, filtered to what the viewer may see. No HTML here.

A viewer sees the jobs of the queues their token may use (an admin: all), and the log of a job
only if it is theirs (or they are an admin). Other queues' work appears in the cluster map
and the preemption list only as its queue's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from caldera.model import GPU_MILLI, JobType, Node

__all__ = [
    "SORTABLE",
    "Bucket",
    "DomainRoom",
    "GpuCell",
    "JobRow",
    "NodeMap",
    "Preemption",
    "QueueRow",
    "TimelineEntry",
    "Viewer",
    "common_scale",
    "domain_room",
    "job_row",
    "preemption_buckets",
    "preemptions",
    "sort_jobs",
    "timeline",
]

LIVE_STATES = ("Held", "Pending", "Running", "Releasing")
JOB_COLUMNS = (
    "id",
    "name",
    "user",
    "queue",
    "type",
    "state",
    "gpus",
    "wait",
    "runtime",
    "evictions",
)
SORTABLE = (*JOB_COLUMNS, "submit_time")  # the jobs page sorts by submit time unless told


@dataclass(frozen=True)
class Viewer:
    user: str
    queues: frozenset[str]
    admin: bool

    def sees_queue(self, queue: str) -> bool:
        return self.admin or "*" in self.queues or queue in self.queues

    def sees_log(self, row: dict[str, Any]) -> bool:
        return self.admin or row["user"] == self.user


@dataclass(frozen=True)
class QueueRow:
    name: str
    state: str
    weight: int
    allocated: float  # GPUs
    deserved: float  # GPUs: set, or the cluster split by weight
    deserved_set: bool
    guarantee: float | None
    capability: float | None
    pending: int
    held: int
    running: int
    throttled_for: str | None  # the large job the queue's waiting mode is for
    throttled_seconds: float | None
    throttled_name: str = ""  # that job's name
    span: float = 0.0  # the GPUs every queue's bar spans (`common_scale`); 0: its own numbers
    parent: str | None = None  # the department above the queue (DESIGN §2 "Hierarchy")

    @property
    def largest(self) -> float:
        return max(self.allocated, self.deserved, self.guarantee or 0, self.capability or 0, 1)

    @property
    def scale(self) -> float:
        """The GPUs the bar spans: the same for every queue shown, so bars compare."""
        return self.span or self.largest

    def percent(self, gpus: float | None) -> float:
        return 0.0 if gpus is None else round(100 * gpus / self.scale, 1)


def common_scale(rows: Sequence[QueueRow]) -> list[QueueRow]:
    """The rows with one span for every bar: the largest number of any of them (a queue
    of 2 GPUs next to one of 64 must not draw as long)."""
    span = max((row.largest for row in rows), default=1.0)
    return [replace(row, span=span) for row in rows]


@dataclass(frozen=True)
class JobRow:
    id: str
    name: str
    user: str
    queue: str
    type: str
    state: str
    gpus: float
    submit_time: float
    wait: float | None  # the latest wait: from submit or the latest requeue, to a start or now
    runtime: float | None  # since the last start (running), or last start to end
    evictions: int
    lost_gpu_hours: float
    hold_reason: str | None

    def key(self, column: str) -> Any:
        value = getattr(self, column)
        return (value is None, value if value is not None else 0)


def job_row(row: dict[str, Any], now: float, requeued_at: float | None = None) -> JobRow:
    """`requeued_at`: the job's latest requeue (`Store.requeued_at`): its wait starts there,
    not at its submission (a requeued victim waits again; its first wait is history)."""
    request = row["request"]
    first, last, end = row["first_start"], row["start_time"], row["end_time"]
    if requeued_at is not None:
        started = last if last is not None and last >= requeued_at else None
        wait = (started if started is not None else (end if end is not None else now)) - (
            requeued_at
        )
    else:
        until = first if first is not None else (end if end is not None else now)
        wait = until - row["submit_time"]
    running: float | None = None  # the current run, or the last one of an ended job
    if last is not None and row["state"] in ("Running", "Releasing"):
        running = now - last
    elif last is not None and end is not None:
        running = end - last
    return JobRow(
        id=row["id"],
        name=row["name"],
        user=row["user"],
        queue=row["queue"],
        type=row["type"],
        state=row["state"],
        gpus=request["gpu"] * request["tasks"] / GPU_MILLI,
        submit_time=row["submit_time"],
        wait=max(wait, 0.0),
        runtime=max(running, 0.0) if running is not None else None,
        evictions=row["evictions"],
        lost_gpu_hours=(row["lost_gpu_seconds"] or 0.0) / 3600,
        hold_reason=row["hold_reason"],
    )


def sort_jobs(rows: list[JobRow], column: str, descending: bool) -> list[JobRow]:
    """By `column` (one of SORTABLE; anything else: submit time), then submit time, then id."""
    if column not in SORTABLE:
        column = "submit_time"
    return sorted(rows, key=lambda r: (r.key(column), r.submit_time, r.id), reverse=descending)


@dataclass(frozen=True)
class TimelineEntry:
    t: float
    kind: str
    text: str
    other: str | None = None  # a job the entry names (preemptor or victim)
    other_name: str = ""


def _gpus(value: Any) -> str:
    return f"{float(value):g}" if value is not None else "?"


def _placement(data: dict[str, Any]) -> str:
    where = data.get("placement") or {}
    return ", ".join(f"{node}: {_gpus(gpus)} GPU" for node, gpus in where.items())


def _started(data: dict[str, Any]) -> str:
    grow = " (more tasks)" if data.get("grow") else ""
    return f"started{grow}, attempt {data.get('attempt')}, on {_placement(data)}"


def _evicted(data: dict[str, Any]) -> str:
    who = f", for a {data.get('preemptor_type')} job:" if data.get("preemptor") else ""
    return f"SIGTERM ({data.get('reason')}, {_gpus(data.get('gpus'))} GPU){who}"


def _requeued(data: dict[str, Any]) -> str:
    lost = float(data.get("lost_gpu_seconds") or 0.0) / 3600
    return f"requeued ({data.get('reason')}), {lost:.4f} GPU-hours lost"


def _failed(data: dict[str, Any]) -> str:
    retry = f", retry {data['retry']}" if data.get("retry") else ""
    return f"failed: exit {data.get('exit_code')}{retry}"


_SAYS: dict[str, Callable[[dict[str, Any]], str]] = {
    "submit": lambda d: f"submitted by {d.get('user', '?')}",
    "hold": lambda d: f"held ({d.get('reason')})",
    "release": lambda d: f"released ({d.get('reason')})",
    "start": _started,
    "evict": _evicted,
    "checkpoint": lambda d: f"checkpoint ({d.get('reason')}), step {d.get('step')}",
    "requeue": _requeued,
    "finish": lambda d: "finished: exit 0",
    "fail": _failed,
    "oom": lambda d: f"task {d.get('task')} killed: {d.get('reason')}",
    "cancel": lambda d: f"cancelled ({d.get('reason')})",
    "throttle_on": lambda d: f"queue {d.get('queue')} held new submissions for it (waiting mode)",
    "throttle_off": lambda d: f"queue {d.get('queue')} left waiting mode ({d.get('reason')})",
}
"""What a job's own event says on its timeline, by event kind."""


def timeline(
    own: Iterable[dict[str, Any]], caused: Iterable[dict[str, Any]]
) -> list[TimelineEntry]:
    """A job's history from its own events, plus the evictions it caused as a preemptor
    (the jobs named are given their names by the page, `TimelineEntry.other_name`)."""
    entries: list[TimelineEntry] = []
    for event in own:
        data = event["data"] or {}
        kind = event["kind"]
        says = _SAYS.get(kind)
        other = data.get("preemptor") if kind == "evict" else None
        entries.append(TimelineEntry(event["t"], kind, says(data) if says else kind, other))
    for event in caused:
        data = event["data"] or {}
        victim = event["job"]
        gpus = _gpus(data.get("gpus"))
        text = f"{data.get('reason')}: took {gpus} GPU from a {data.get('victim_type')} job:"
        entries.append(TimelineEntry(event["t"], "preempted", text, victim))
    return sorted(entries, key=lambda e: e.t)


@dataclass(frozen=True)
class Preemption:
    t: float
    victim: str
    victim_type: str
    victim_queue: str
    preemptor: str | None
    preemptor_type: str | None
    preemptor_queue: str | None
    victim_name: str
    preemptor_name: str
    reason: str
    gpus: float
    lost_gpu_hours: float | None  # known once the victim is requeued


def preemptions(
    evictions: Iterable[dict[str, Any]],
    requeues: Iterable[dict[str, Any]],
    queue_of: dict[str, str],
    name_of: dict[str, str] | None = None,
) -> list[Preemption]:
    """Evictions (not cancels), newest first, each with the work its victim lost: the
    victim's next requeue after the eviction carries it. `name_of`: the jobs' names."""
    name_of = name_of or {}
    later: dict[str, list[tuple[float, float]]] = {}
    for event in requeues:
        data = event["data"] or {}
        if data.get("reason") == "evicted":
            later.setdefault(event["job"], []).append(
                (event["t"], float(data.get("lost_gpu_seconds") or 0.0))
            )
    found = []
    for event in evictions:
        data = event["data"] or {}
        if data.get("reason") == "cancel":
            continue
        victim = event["job"]
        lost = next((s for t, s in sorted(later.get(victim, [])) if t >= event["t"]), None)
        preemptor = data.get("preemptor")
        found.append(
            Preemption(
                t=event["t"],
                victim=victim,
                victim_type=str(data.get("victim_type")),
                victim_queue=queue_of.get(victim, "?"),
                preemptor=preemptor,
                preemptor_type=data.get("preemptor_type"),
                preemptor_queue=queue_of.get(preemptor) if preemptor else None,
                victim_name=name_of.get(victim, ""),
                preemptor_name=name_of.get(preemptor, "") if preemptor else "",
                reason=str(data.get("reason")),
                gpus=float(data.get("gpus") or 0.0),
                lost_gpu_hours=lost / 3600 if lost is not None else None,
            )
        )
    return sorted(found, key=lambda p: p.t, reverse=True)


@dataclass(frozen=True)
class Bucket:
    start: float
    counts: dict[str, int] = field(default_factory=dict)  # reason -> evictions

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def preemption_buckets(found: Sequence[Preemption], now: float, count: int = 24) -> list[Bucket]:
    """Evictions over time in `count` equal buckets ending now, spanning the history (at least
    ten minutes, so a fresh server shows minutes rather than milliseconds)."""
    first = min((p.t for p in found), default=now)
    span = max(now - first, 600.0)
    width = span / count
    start = now - span
    buckets = [Bucket(start + i * width, {}) for i in range(count)]
    for item in found:
        index = min(int((item.t - start) // width), count - 1)
        if index >= 0:
            counts = buckets[index].counts
            counts[item.reason] = counts.get(item.reason, 0) + 1
    return buckets


@dataclass(frozen=True)
class GpuCell:
    index: int
    free: float  # share of the device free, 0..1
    holders: tuple[str, ...]  # job ids the viewer may see, else queue names
    releasing: bool
    drained: str | None = None  # why the GPU takes no new work (health); None: healthy
    names: tuple[str, ...] = ()  # beside each holder: its job's name ('' for a queue)


@dataclass(frozen=True)
class NodeMap:
    name: str
    gpu_model: str
    tier1: int
    tier2: int
    cells: tuple[GpuCell, ...]


@dataclass(frozen=True)
class DomainRoom:
    """Free room of one tier-1 domain, and how scattered it is."""

    tier1: int
    nodes: int
    gpus: int
    free: float  # GPUs, shares included
    whole_free: int  # devices entirely free
    empty_nodes: int  # nodes with every device free
    empty_gpus: int  # devices on those nodes
    largest: int  # most whole free devices on one node

    @property
    def fragmentation(self) -> float:
        """Share of the free whole GPUs not on empty nodes: room a full-node task cannot use."""
        if self.whole_free == 0:
            return 0.0
        return 1 - self.empty_gpus / self.whole_free


def domain_room(nodes: Sequence[Node], maps: Sequence[NodeMap]) -> list[DomainRoom]:
    by_domain: dict[int, list[tuple[Node, NodeMap]]] = {}
    for node, gpu_map in zip(nodes, maps, strict=True):
        by_domain.setdefault(node.tier1, []).append((node, gpu_map))
    rooms = []
    for tier1, members in sorted(by_domain.items()):
        whole = [sum(1 for c in m.cells if math.isclose(c.free, 1.0)) for _, m in members]
        rooms.append(
            DomainRoom(
                tier1=tier1,
                nodes=len(members),
                gpus=sum(n.gpus for n, _ in members),
                free=round(sum(c.free for _, m in members for c in m.cells), 3),
                whole_free=sum(whole),
                empty_nodes=sum(1 for (n, _), w in zip(members, whole, strict=True) if w == n.gpus),
                empty_gpus=sum(
                    n.gpus for (n, _), w in zip(members, whole, strict=True) if w == n.gpus
                ),
                largest=max(whole, default=0),
            )
        )
    return rooms


TYPES = tuple(t.value for t in JobType)
