"""The dashboard's values without a browser: job rows, sorting, timelines, the preemption list
(each eviction paired with the work its victim lost), buckets over time, free room per domain,
and what a viewer may see."""

from __future__ import annotations

from typing import Any

import pytest

from builders import cluster
from caldera.service.ui import STATIC
from caldera.service.ui.reads import (
    GpuCell,
    NodeMap,
    Viewer,
    domain_room,
    job_row,
    preemption_buckets,
    preemptions,
    sort_jobs,
    timeline,
)

NOW = 1_800_000_000.0


def row(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "j-1",
        "name": "train",
        "user": "alice",
        "queue": "team-a",
        "type": "normal",
        "state": "Pending",
        "request": {"gpu": 1000, "tasks": 2},
        "submit_time": NOW - 100,
        "first_start": None,
        "start_time": None,
        "end_time": None,
        "evictions": 0,
        "lost_gpu_seconds": 0.0,
        "hold_reason": None,
    }
    base.update(fields)
    return base


JOB_ROWS = [
    ("waiting: waited so far", row(), (100.0, None, 2.0)),
    (
        "running: its wait, and the current run",
        row(state="Running", first_start=NOW - 60, start_time=NOW - 60),
        (40.0, 60.0, 2.0),
    ),
    (
        "requeued after a run: no run going on",
        row(state="Pending", first_start=NOW - 90, start_time=NOW - 90, evictions=1),
        (10.0, None, 2.0),
    ),
    (
        "finished: wait and its last run",
        row(state="Succeeded", first_start=NOW - 90, start_time=NOW - 50, end_time=NOW - 20),
        (10.0, 30.0, 2.0),
    ),
    ("cancelled before starting", row(state="Cancelled", end_time=NOW - 30), (70.0, None, 2.0)),
]


@pytest.mark.parametrize(("data", "want"), [c[1:] for c in JOB_ROWS], ids=[c[0] for c in JOB_ROWS])
def test_job_row(data: dict[str, Any], want: tuple[float, float | None, float]) -> None:
    got = job_row(data, NOW)
    assert (got.wait, got.runtime, got.gpus) == pytest.approx(want)


def test_sorting_puts_unknown_values_last_and_unknown_columns_by_submit_time() -> None:
    rows = [
        job_row(row(id="j-a", state="Running", first_start=NOW - 10, start_time=NOW - 10), NOW),
        job_row(row(id="j-b"), NOW),
        job_row(row(id="j-c", state="Running", first_start=NOW - 5, start_time=NOW - 50), NOW),
    ]
    assert [r.id for r in sort_jobs(rows, "runtime", descending=False)] == ["j-a", "j-c", "j-b"]
    assert [r.id for r in sort_jobs(rows, "wait", descending=True)] == ["j-b", "j-c", "j-a"]
    assert [r.id for r in sort_jobs(rows, "nonsense", descending=False)] == ["j-a", "j-b", "j-c"]


def test_the_default_sort_is_by_submit_time_not_by_id() -> None:
    # Ids are not in submission order (a restarted server, another generator).
    rows = [
        job_row(row(id="j-b", submit_time=NOW - 30), NOW),
        job_row(row(id="j-a", submit_time=NOW - 10), NOW),
        job_row(row(id="j-c", submit_time=NOW - 20), NOW),
    ]
    assert [r.id for r in sort_jobs(rows, "submit_time", descending=True)] == ["j-a", "j-c", "j-b"]


def test_a_requeued_jobs_wait_counts_from_its_requeue() -> None:
    # Started 90 s ago after no wait, evicted and requeued 30 s ago: it has waited 30 s.
    requeued = row(state="Pending", submit_time=NOW - 90, first_start=NOW - 90,
                   start_time=NOW - 90, evictions=1)  # fmt: skip
    assert job_row(requeued, NOW, requeued_at=NOW - 30).wait == pytest.approx(30.0)
    # Started again 10 s ago: its latest wait was 20 s.
    again = {**requeued, "state": "Running", "start_time": NOW - 10}
    assert job_row(again, NOW, requeued_at=NOW - 30).wait == pytest.approx(20.0)


def event(t: float, kind: str, job: str, **data: Any) -> dict[str, Any]:
    return {"t": t, "kind": kind, "job": job, "data": data}


EVICT = event(
    NOW - 50, "evict", "j-v", reason="preempt", preemptor="j-p", victim_type="normal",
    preemptor_type="large-job", gpus=8.0,
)  # fmt: skip


def test_a_timeline_says_a_task_was_killed_at_its_memory_limit() -> None:
    oom = event(NOW - 5, "oom", "j-1", task=0, reason="out of memory (limit 128 MiB)")
    (entry,) = timeline([oom], [])
    assert entry.text == "task 0 killed: out of memory (limit 128 MiB)"


def test_a_timeline_names_the_preemptor_and_the_victim() -> None:
    own = [
        event(NOW - 100, "submit", "j-v", user="alice"),
        event(NOW - 90, "start", "j-v", placement={"vm": 8.0}, attempt=1, grow=False),
        EVICT,
        event(NOW - 45, "requeue", "j-v", reason="evicted", lost_gpu_seconds=360.0),
    ]
    victim = timeline(own, [])
    assert [e.kind for e in victim] == ["submit", "start", "evict", "requeue"]
    assert victim[2].other == "j-p" and "large-job" in victim[2].text
    assert "0.1000 GPU-hours lost" in victim[3].text
    preemptor = timeline([event(NOW - 60, "submit", "j-p", user="ops")], [EVICT])
    assert [(e.kind, e.other) for e in preemptor] == [("submit", None), ("preempted", "j-v")]


def test_each_preemption_carries_the_work_its_victim_lost() -> None:
    requeues = [
        event(NOW - 200, "requeue", "j-v", reason="evicted", lost_gpu_seconds=1.0),  # earlier
        event(NOW - 45, "requeue", "j-v", reason="evicted", lost_gpu_seconds=360.0),
        event(NOW - 40, "requeue", "j-x", reason="lost", lost_gpu_seconds=99.0),
    ]
    cancel = event(NOW - 30, "evict", "j-c", reason="cancel", preemptor=None, victim_type="debug")
    found = preemptions([EVICT, cancel], requeues, {"j-v": "team-a", "j-p": "team-a"})
    assert len(found) == 1  # a user's cancel is not a preemption
    taken = found[0]
    assert (taken.victim, taken.preemptor, taken.victim_queue) == ("j-v", "j-p", "team-a")
    assert taken.lost_gpu_hours == pytest.approx(0.1)
    still = preemptions([EVICT], [], {})[0]
    assert still.lost_gpu_hours is None  # not requeued yet: unknown, not zero


def test_buckets_end_now_and_count_by_reason() -> None:
    found = preemptions(
        [EVICT, {**EVICT, "t": NOW - 1, "data": {**EVICT["data"], "reason": "reclaim"}}], [], {}
    )
    buckets = preemption_buckets(found, NOW, count=10)
    assert len(buckets) == 10
    assert buckets[-1].counts == {"preempt": 1, "reclaim": 1}  # 600 s / 10: both in the last
    assert sum(b.total for b in buckets) == 2


def test_free_room_per_domain() -> None:
    nodes = cluster().group("n", count=3, gpus=4, per_tier1=2).build()

    def cells(free: list[float]) -> tuple[GpuCell, ...]:
        return tuple(GpuCell(i, f, (), False) for i, f in enumerate(free))

    maps = [
        NodeMap("n-0", "H100", 0, 0, cells([1, 1, 1, 1])),  # empty
        NodeMap("n-1", "H100", 0, 0, cells([1, 0, 0.5, 1])),  # two whole free, one half
        NodeMap("n-2", "H100", 1, 0, cells([0, 0, 0, 0])),
    ]
    first, second = domain_room(nodes, maps)
    assert (first.nodes, first.free, first.whole_free, first.empty_nodes) == (2, 6.5, 6, 1)
    assert first.largest == 4
    assert first.fragmentation == pytest.approx(1 / 3)  # 2 of 6 whole free GPUs off empty nodes
    assert (second.free, second.fragmentation) == (0, 0.0)


def test_what_a_viewer_sees() -> None:
    alice = Viewer("alice", frozenset({"team-a"}), admin=False)
    assert alice.sees_queue("team-a") and not alice.sees_queue("team-b")
    assert alice.sees_log(row(user="alice")) and not alice.sees_log(row(user="carol"))
    admin = Viewer("ops", frozenset(), admin=True)
    assert admin.sees_queue("team-b") and admin.sees_log(row(user="carol"))
    assert Viewer("x", frozenset({"*"}), admin=False).sees_queue("any")


def test_the_package_serves_htmx_itself() -> None:
    """Built by scripts/ui-assets.sh from the npm registry: no CDN, works offline."""
    htmx = STATIC / "vendor" / "htmx.min.js"
    assert htmx.is_file(), "run make ui-assets"
    assert b"htmx" in htmx.read_bytes()[:4096]
    base = (STATIC.parent / "templates" / "base.html").read_text()
    assert "/ui/static/vendor/htmx.min.js" in base and "https://" not in base


class FakeStore:
    def __init__(self, jobs: dict[str, dict[str, Any]]) -> None:
        self.jobs = jobs

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self.jobs.get(job_id)


class FakeRuntime:
    """The read views the dashboard asks the runtime for, fixed by the test."""

    def __init__(self) -> None:
        from caldera.model import Queue, Resources
        from caldera.service.views import ClusterView, DeviceView, NodeView, QueueView

        self.nodes = cluster().group("n", count=1, gpus=4).build()
        self.cluster = ClusterView(
            nodes=(
                NodeView(
                    "n-0",
                    "H100",
                    (
                        DeviceView(0, 0, ("j-mine",)),
                        DeviceView(1, 0, ("j-theirs",), releasing=True),
                        DeviceView(2, 500, ("j-theirs", "j-mine")),
                        DeviceView(3, 1000, (), drained="xid 79"),
                    ),
                ),
            ),
            throttles={},
            jobs_by_state={},
            queue_of={"j-mine": "team-a", "j-theirs": "team-b"},
            name_of={"j-mine": "my-train", "j-theirs": "their-train"},
        )
        self.store = FakeStore({"j-big": {"name": "pretrain", "queue": "team-a"}})
        self.queues = [
            QueueView(Queue("team-a", weight=3), 2000, 1, 0, 2, "j-big", NOW - 42),
            QueueView(Queue("team-b", deserved=Resources(gpu=1000)), 1500, 0, 0, 1, None),
        ]

    def cluster_view(self) -> Any:
        return self.cluster

    def queue_views(self) -> Any:
        return self.queues


def test_the_gpu_map_hides_other_queues_jobs_behind_their_queue() -> None:
    from caldera.service.ui.live import gpu_maps

    alice = Viewer("alice", frozenset({"team-a"}), admin=False)
    (node,) = gpu_maps(FakeRuntime(), alice)  # type: ignore[arg-type]
    assert [c.holders for c in node.cells] == [
        ("j-mine",),
        ("team-b",),
        ("team-b", "j-mine"),
        (),
    ]
    assert [(c.free, c.releasing, c.drained) for c in node.cells] == [
        (0.0, False, None),
        (0.0, True, None),
        (0.5, False, None),
        (1.0, False, "xid 79"),
    ]
    admin = Viewer("ops", frozenset(), admin=True)
    assert gpu_maps(FakeRuntime(), admin)[0].cells[1].holders == ("j-theirs",)  # type: ignore[arg-type]


def test_the_gpu_map_names_the_jobs_a_viewer_may_see() -> None:
    from caldera.service.ui.live import gpu_maps

    alice = Viewer("alice", frozenset({"team-a"}), admin=False)
    (node,) = gpu_maps(FakeRuntime(), alice)  # type: ignore[arg-type]
    assert [c.names for c in node.cells] == [("my-train",), ("",), ("", "my-train"), ()]


def test_every_queue_bar_has_one_scale_and_every_colour_is_in_the_legend() -> None:
    from caldera.service.ui.live import queue_rows

    admin = Viewer("ops", frozenset(), admin=True)
    team_a, team_b = queue_rows(FakeRuntime(), admin, NOW)  # type: ignore[arg-type]
    assert team_a.scale == team_b.scale == 3.0  # team-a's deserved, the largest number
    assert team_b.percent(team_b.allocated) == 50.0  # 1.5 of 3, not 1.5 of its own 1.5
    templates = STATIC.parent / "templates"
    live = (templates / "_live.html").read_text()
    bar = live.split("{% macro queue_bar(q) -%}")[1].split("{%- endmacro %}")[0]
    legend = live.split("{% macro bar_legend() -%}")[1].split("{%- endmacro %}")[0]
    for colour in ("fill", "over", "deserved", "guarantee", "capability"):
        assert colour in bar and f'class="key {colour}"' in legend, colour
    for page in ("queues.html", "_overview.html"):
        assert "bar_legend()" in (templates / page).read_text(), page


def test_the_preemption_list_names_its_jobs() -> None:
    (found,) = preemptions([EVICT], [], {}, {"j-v": "victim-run", "j-p": "big-run"})
    assert (found.victim_name, found.preemptor_name) == ("victim-run", "big-run")


def test_queue_rows_split_the_cluster_by_weight_and_time_the_throttle() -> None:
    from caldera.service.ui.live import queue_rows, state_counts

    admin = Viewer("ops", frozenset(), admin=True)
    team_a, team_b = queue_rows(FakeRuntime(), admin, NOW)  # type: ignore[arg-type]
    assert (team_a.deserved, team_a.deserved_set) == (3.0, False)  # 4 GPUs x 3 / (3 + 1)
    assert (team_a.throttled_for, team_a.throttled_seconds) == ("j-big", 42.0)
    assert team_a.throttled_name == "pretrain"
    assert (team_b.deserved, team_b.deserved_set, team_b.throttled_for) == (1.0, True, None)
    assert state_counts([team_a, team_b]) == {"Held": 0, "Pending": 1, "Running": 3}
    alice = Viewer("alice", frozenset({"team-a"}), admin=False)
    assert [r.name for r in queue_rows(FakeRuntime(), alice, NOW)] == ["team-a"]  # type: ignore[arg-type]


def test_queue_rows_put_each_department_above_its_teams_with_their_shares_of_it() -> None:
    """Issue 39: a department, then its teams (whose weight splits the department's share, not
    the cluster's), then the next top-level queue."""
    from caldera.model import Queue, Resources
    from caldera.service.ui.live import queue_rows
    from caldera.service.views import QueueView

    runtime = FakeRuntime()
    runtime.queues = [
        QueueView(Queue("web", weight=3, parent="product"), 2000, 0, 0, 1, None),
        QueueView(Queue("lab", weight=1), 0, 0, 0, 0, None),
        QueueView(Queue("product", deserved=Resources(gpu=2000)), 2000, 0, 0, 1, None),
        QueueView(Queue("search", weight=1, parent="product"), 0, 0, 0, 0, None),
    ]
    admin = Viewer("ops", frozenset(), admin=True)
    rows = queue_rows(runtime, admin, NOW)  # type: ignore[arg-type]
    assert [(r.name, r.parent) for r in rows] == [
        ("lab", None),
        ("product", None),
        ("search", "product"),
        ("web", "product"),
    ]
    deserved = {r.name: r.deserved for r in rows}
    assert deserved == {"lab": 2.0, "product": 2.0, "web": 1.5, "search": 0.5}
