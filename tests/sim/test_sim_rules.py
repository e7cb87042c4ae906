"""Simulator semantics (DESIGN §4.3, §6) on tiny scenarios, one rule each.

Scenarios are written as the dicts a YAML file would decode to and go through the real
loader (`parse_scenario`), so the file format is exercised too.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from caldera.sim import Simulator, parse_scenario, simulate


def scenario(
    jobs: list[dict[str, Any]],
    *,
    nodes: int = 1,
    gpus: int = 8,
    queues: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    defaults = {"queue": "q", "type": "normal", "submit": 0, "gpus_per_task": 8}
    return {
        "cluster": {"nodes": [{"prefix": "n", "count": nodes, "gpus": gpus}]},
        "queues": queues if queues is not None else [{"name": "q"}],
        "jobs": [{**defaults, **j} for j in jobs],
        **extra,
    }


def events(result: dict[str, Any], kind: str, job: str | None = None) -> list[dict[str, Any]]:
    return [e for e in result["events"] if e["kind"] == kind and (job is None or e["job"] == job)]


def record(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(j for j in result["jobs"] if j["name"] == name)


def test_idle_cluster_starts_a_job_at_its_submit_time() -> None:
    result = simulate(parse_scenario(scenario([{"name": "a", "submit": 42, "duration": 100}])))
    assert [e["t"] for e in events(result, "start", "a")] == [42.0]
    assert record(result, "a")["end"] == 142.0


def test_emergency_checkpoint_releases_at_its_cost_and_keeps_progress() -> None:
    """Victim: 8 GPUs, started 0, checkpoint cost 30 ≤ grace 120. Large job at 1000.
    §6: it saves at eviction and releases at 1000 + 30; the preemptor starts then; nothing is
    lost; it resumes later with 10000 - 1000 = 9000 s left."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {"name": "v", "duration": 10_000, "checkpoint_cost": 30},
                    {"name": "big", "type": "large-job", "submit": 1000, "duration": 500},
                ]
            )
        )
    )
    (evict,) = events(result, "evict", "v")
    assert (evict["t"], evict["released_at"], evict["preemptor"], evict["reason"]) == (
        1000.0,
        1030.0,
        "big",
        "preempt",
    )
    assert [e["t"] for e in events(result, "start", "big")] == [1030.0]
    v = record(result, "v")
    assert v["lost_gpu_seconds"] == 0
    # big runs 1030..1530, then v resumes with 9000 s left
    assert [e["t"] for e in events(result, "start", "v")] == [0.0, 1530.0]
    assert v["end"] == 1530.0 + 9000.0


def _no_emergency_checkpoint(**extra: Any) -> dict[str, Any]:
    return simulate(
        parse_scenario(
            scenario(
                [
                    {
                        "name": "v",
                        "duration": 10_000,
                        "checkpoint_interval": 600,
                        "checkpoint_on_sigterm": False,
                    },
                    {"name": "big", "type": "large-job", "submit": 1000, "duration": 500},
                ],
                **extra,
            )
        )
    )


def test_no_emergency_checkpoint_waits_the_grace_period_and_loses_work() -> None:
    """checkpoint_on_sigterm false, periodic checkpoint every 600 s, evictions never timed
    (checkpoint_wait 0): evicted at 1000 it keeps 600 s of work, loses 400 s × 8 GPUs = 3200
    GPU-seconds, releases at 1000 + 120."""
    result = _no_emergency_checkpoint(policy={"checkpoint_wait": 0})
    (evict,) = events(result, "evict", "v")
    assert evict["released_at"] == 1120.0
    assert record(result, "v")["lost_gpu_seconds"] == 3200.0
    assert result["metrics"]["wasted_gpu_hours"] == round(3200 / 3600, 6)
    # resumes at 1620 (big: 1120..1620) with 10000 - 600 s of work left
    assert record(result, "v")["end"] == 1620.0 + 9400.0


def test_an_eviction_is_timed_to_the_victims_next_checkpoint() -> None:
    """The same with the defaults (DESIGN §4.4, core/timing.py): v's next checkpoint (1200)
    plus the 1 s margin and the 120 s grace lets big start at 1321, inside checkpoint_wait
    (600 s after its submission) and its SLO: v is signalled at 1201 and loses the margin's
    1 s × 8 GPUs, not 3200 GPU-seconds."""
    result = _no_emergency_checkpoint()
    (evict,) = events(result, "evict", "v")
    assert (evict["t"], evict["released_at"]) == (1201.0, 1321.0)
    assert record(result, "v")["lost_gpu_seconds"] == 8.0
    assert record(result, "big")["start"] == 1321.0
    # resumes at 1821 (big: 1321..1821) with 10000 - 1200 s of work left
    assert record(result, "v")["end"] == 1821.0 + 8800.0


def test_checkpoint_too_slow_for_the_grace_period_counts_as_none() -> None:
    """checkpoint_cost 300 > grace 120: released at eviction + grace, progress since the last
    periodic checkpoint (none: 0) lost: 1000 s × 8 GPUs."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {"name": "v", "duration": 10_000, "checkpoint_cost": 300},
                    {"name": "big", "type": "large-job", "submit": 1000, "duration": 500},
                ]
            )
        )
    )
    (evict,) = events(result, "evict", "v")
    assert evict["released_at"] == 1120.0
    assert record(result, "v")["lost_gpu_seconds"] == 8000.0


def test_requeued_job_keeps_its_original_submit_time() -> None:
    """After eviction `v` (submitted 0) competes with `w` (submitted 200) for the node the
    large job frees: the earlier submit time wins."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {"name": "v", "duration": 10_000},
                    {"name": "big", "type": "large-job", "submit": 100, "duration": 500},
                    {"name": "w", "submit": 200, "duration": 100},
                ]
            )
        )
    )
    assert record(result, "v")["submit"] == 0
    # big 100..600; then v (submit 0) before w (submit 200)
    assert [e["t"] for e in events(result, "start", "v")] == [0.0, 600.0]
    assert record(result, "w")["start"] == 600.0 + (10_000 - 100)


def test_budget_spillover_keeps_extras_only_eviction() -> None:
    """B3 (fixed). 2 nodes × 8 → budget max(4.8, 8) = 8 GPUs per cycle. B: 2×4 elastic
    (min 1, both tasks on n-0); A: 1×8 on n-1; L: 3×4 large. The plan {A, B's extra task}
    spills over the budget; the next cycle must signal B's extra task only (4 GPUs)."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {
                        "name": "B",
                        "duration": 100_000,
                        "tasks": 2,
                        "gpus_per_task": 4,
                        "min_available": 1,
                    },
                    {"name": "A", "submit": 100, "duration": 100_000, "gpus_per_task": 8},
                    {
                        "name": "L",
                        "type": "large-job",
                        "submit": 200,
                        "duration": 1000,
                        "tasks": 3,
                        "gpus_per_task": 4,
                    },
                ],
                nodes=2,
                until=5000,
            )
        )
    )
    b_evictions = [(e["tasks"], e["gpus"]) for e in events(result, "evict", "B")]
    assert b_evictions == [(1, 4)]
    assert [e["t"] for e in events(result, "start", "L")] == [200.0]
    assert result["metrics"]["gang_hang_gpu_hours"] == 0


def _runs_within(data: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """Run the simulator in a thread; None if it has not finished in time."""
    out: dict[str, Any] = {}

    def target() -> None:
        out["result"] = Simulator(parse_scenario(data)).run().result()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    return out.get("result")


def test_time_window_scenario_without_until_terminates() -> None:
    """B4 (fixed). A windowed queue and no `until`: the run ends when the work is done."""
    data = scenario(
        [{"name": "a", "duration": 3600}],
        queues=[{"name": "q", "time_windows": [{"days": [1, 2, 3, 4, 5], "hours": [9, 18]}]}],
    )
    result = _runs_within(data, 20)
    assert result is not None, "the simulation did not end"
    # Monday 00:00 is outside 9-18: held, released and started at 09:00, done at 10:00
    assert record(result, "a")["start"] == 9 * 3600
    assert record(result, "a")["end"] == 10 * 3600


def test_cancel_of_a_running_job_frees_its_gpus() -> None:
    """`cancel_at` (extension): a running job is signalled with reason cancel and ends
    Cancelled when its room is released; the next job starts then."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {"name": "a", "duration": 10_000, "cancel_at": 500, "gpus_per_task": 8},
                    {"name": "b", "submit": 10, "duration": 100, "gpus_per_task": 8},
                ]
            )
        )
    )
    (evict,) = events(result, "evict", "a")
    assert (evict["reason"], evict["preemptor"]) == ("cancel", None)
    assert record(result, "a")["state"] == "Cancelled"
    assert record(result, "b")["start"] == evict["released_at"]


def test_cancelling_a_critical_job_is_not_a_preemption() -> None:
    """§5: `critical_preempted` must be 0 — it counts preemptions, and a user cancel is not
    one (no preemptor, reason cancel)."""
    result = simulate(
        parse_scenario(
            scenario([{"name": "c", "type": "critical", "duration": 3600, "cancel_at": 60}])
        )
    )
    assert record(result, "c")["state"] == "Cancelled"
    assert result["metrics"]["critical_preempted"] == 0
    assert result["metrics"]["preemptions"]["by_victim_type"].get("critical", 0) == 0


def test_cancel_at_the_submit_instant_cancels_the_job() -> None:
    result = simulate(
        parse_scenario(scenario([{"name": "a", "submit": 100, "duration": 60, "cancel_at": 100}]))
    )
    kinds = [e["kind"] for e in result["events"] if e["job"] == "a"]
    assert "start" not in kinds
    assert record(result, "a")["state"] == "Cancelled"
    assert kinds.index("submit") < kinds.index("cancel")
    assert 0 <= result["metrics"]["gpu_allocation_rate"] <= 1


def test_backfill_never_delays_the_reservation_it_borrows_from() -> None:
    """§3: backfill may use reserved room only if that does not delay the preemptor. P
    (critical, 8 GPUs, t = 100) evicts A (releases at 110) and B (checkpoint 100 s: releases
    at 200). G says it needs 30 s and is let into A's freed half at 150 — but runs 5000 s.
    When the reservation is due (200) the filler must give way; with a graceful eviction it
    releases within the 120 s grace period, so P starts by 320 at the latest."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {"name": "A", "duration": 20_000, "gpus_per_task": 4, "checkpoint_cost": 10},
                    {
                        "name": "B",
                        "submit": 1,
                        "duration": 20_000,
                        "gpus_per_task": 4,
                        "checkpoint_cost": 100,
                    },
                    {"name": "P", "type": "critical", "submit": 100, "duration": 100},
                    {
                        "name": "G",
                        "queue": "o",
                        "submit": 150,
                        "duration": 5000,
                        "gpus_per_task": 4,
                        "expected_duration": 30,
                    },
                ],
                queues=[{"name": "q"}, {"name": "o"}],
            )
        )
    )
    assert record(result, "P")["start"] <= 320


def test_critical_job_is_not_passed_over_for_room_it_needs() -> None:
    """One 8-GPU node. A (normal, queue q) and G (normal, queue o, ends at 1000) each hold 4.
    P (critical, q, 8 GPUs) arrives at 500: A is its only candidate (o is at its deserved
    share), not enough — P waits. At 1000 G's half frees. B (normal, q, submitted 600) must
    not take it from P; P evicts A (emergency checkpoint, released at once) and starts at
    1000, or at worst within the 120 s grace period: by 1120."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {"name": "A", "duration": 20_000, "gpus_per_task": 4},
                    {"name": "G", "queue": "o", "duration": 1000, "gpus_per_task": 4},
                    {"name": "P", "type": "critical", "submit": 500, "duration": 100},
                    {"name": "B", "submit": 600, "duration": 20_000, "gpus_per_task": 4},
                ],
                queues=[{"name": "q"}, {"name": "o"}],
            )
        )
    )
    assert record(result, "P")["start"] <= 1120


def test_metrics_on_a_hand_computed_run() -> None:
    """1 node × 8. a: 4 GPUs, 0-1000. b: 4 GPUs, 500-1500. c: 8 GPUs at 600, waits for both:
    starts 1500, ends 1600. Observed 0-1600: allocated GPU-seconds 4·1000 + 4·1000 + 8·100 =
    8800 of 8·1600 = 12800 → 0.6875. Waits: a 0, b 0, c 900 (normal SLO 4 h: all met)."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {"name": "a", "duration": 1000, "gpus_per_task": 4},
                    {"name": "b", "submit": 500, "duration": 1000, "gpus_per_task": 4},
                    {"name": "c", "submit": 600, "duration": 100},
                ]
            )
        )
    )
    metrics = result["metrics"]
    assert metrics["gpu_utilization"] == round(8800 / 12800, 6)
    wait = metrics["wait"]["normal"]
    assert (wait["count"], wait["max"], wait["p50"]) == (3, 900, 0)
    assert metrics["sla_attainment"]["normal"] == 1.0
    assert metrics["preemptions"]["total"] == 0 and metrics["wasted_gpu_hours"] == 0
    assert metrics["large_job_max_wait"] is None  # no large jobs


def test_an_elastic_job_never_holds_more_than_its_tasks() -> None:
    """Nodes a-0, a-1 (model A) and b-0 (model B), one GPU each. X holds a-0 until 100; E (2
    tasks, min 1) gets a-1 and b-0. P (large, model B) at 200 takes E's extra task on b-0,
    which has no emergency checkpoint: it releases at 200 + 120 = 320. Until then E must not
    start another task (on the now free a-0): its 2 replicas would be 3."""
    result = simulate(
        parse_scenario(
            {
                "cluster": {
                    "nodes": [
                        {"prefix": "a", "count": 2, "gpus": 1, "gpu_model": "A"},
                        {"prefix": "b", "count": 1, "gpus": 1, "gpu_model": "B"},
                    ]
                },
                "queues": [{"name": "q"}],
                "jobs": [
                    {
                        "name": "X",
                        "queue": "q",
                        "type": "normal",
                        "submit": 0,
                        "duration": 100,
                        "gpu_model": "A",
                    },
                    {
                        "name": "E",
                        "queue": "q",
                        "type": "normal",
                        "submit": 1,
                        "duration": 10_000,
                        "tasks": 2,
                        "min_available": 1,
                        "checkpoint_on_sigterm": False,
                    },
                    {
                        "name": "P",
                        "queue": "q",
                        "type": "large-job",
                        "submit": 200,
                        "duration": 1000,
                        "gpu_model": "B",
                    },
                    # any event inside the grace period runs a cycle
                    {
                        "name": "Y",
                        "queue": "q",
                        "type": "critical",
                        "submit": 250,
                        "duration": 10,
                        "gpus_per_task": 0,
                    },
                ],
            }
        )
    )
    (evict,) = events(result, "evict", "E")
    assert (evict["t"], evict["released_at"], evict["tasks"]) == (200.0, 320.0, 1)
    grows = [e["t"] for e in events(result, "start", "E") if e.get("grow")]
    assert all(t >= evict["released_at"] for t in grows), grows


def test_a_pending_victim_is_not_taken_by_two_preemptors() -> None:
    """2 nodes × 8 → budget max(4.8, 8) = 8 GPUs a cycle. P0 (protected, 4) and E (debug,
    2 × 4, min 1) share the room with V1 (debug, 4, newest: the cheapest). L (large, 3 × 4)
    plans {V1, E}: V1 goes now, E (8 GPUs) waits for the next cycle's budget. M (normal, 4)
    must not take E's extra task meanwhile: E would be evicted twice in the same second by
    two non-critical preemptors (DESIGN §4.5), and M's eviction would buy it nothing."""
    result = simulate(
        parse_scenario(
            scenario(
                [
                    {
                        "name": "P0",
                        "duration": 99_999,
                        "gpus_per_task": 4,
                        "labels": {"protected": "true"},
                    },
                    {
                        "name": "E",
                        "type": "debug",
                        "submit": 1,
                        "duration": 99_999,
                        "tasks": 2,
                        "gpus_per_task": 4,
                        "min_available": 1,
                    },
                    {
                        "name": "V1",
                        "type": "debug",
                        "submit": 50,
                        "duration": 99_999,
                        "gpus_per_task": 4,
                    },
                    {
                        "name": "L",
                        "type": "large-job",
                        "submit": 100,
                        "duration": 1000,
                        "tasks": 3,
                        "gpus_per_task": 4,
                    },
                    {"name": "M", "submit": 100, "duration": 1000, "gpus_per_task": 4},
                ],
                nodes=2,
                until=3000,
            )
        )
    )
    e_evictions = [ev["t"] for ev in events(result, "evict", "E")]
    assert all(b - a >= 600 for a, b in itertools.pairwise(e_evictions)), e_evictions
    for evict in events(result, "evict"):
        start = record(result, evict["preemptor"])["start"]
        assert start is not None and start <= evict["released_at"] + 120, evict


def most_held(result: dict[str, Any], queue: str) -> float:
    """The most GPUs `queue` held at any instant (running or releasing), from the events."""
    jobs = {j["name"]: j for j in result["jobs"]}
    held: dict[str, float] = {}
    leaving: list[tuple[float, str, float]] = []
    most = 0.0
    for event in result["events"]:
        t, name = event["t"], event["job"]
        for item in sorted(x for x in leaving if x[0] <= t):
            leaving.remove(item)
            held[item[1]] -= item[2]
        if name is None or jobs[name]["queue"] != queue:
            continue
        if event["kind"] == "start":
            held[name] = held.get(name, 0.0) + event["gpus"]
        elif event["kind"] == "evict":
            leaving.append((event["released_at"], name, event["gpus"]))
        elif event["kind"] == "finish":
            held[name] = sum(g for _, j, g in leaving if j == name)
        most = max(most, sum(held.values()))
    return most


def test_a_nominated_preemptor_never_takes_its_queue_over_capability() -> None:
    """Queue q, capability 15 GPUs. a-0 (model A) holds V (debug, 4, no emergency checkpoint).
    P (critical, 8 × model A) at 100: q holds 4, 4 + 8 = 12 ≤ 15 — V is evicted, releasing at
    100 + 120 = 220, and P nominated. X (normal, 8) at 150 on the free b-0: 4 + 8 = 12 ≤ 15.
    At 220 P must not start beside X: 8 + 8 = 16 > 15 (DESIGN §3: never a queue over its
    capability). Either X waits for P's promised room, or P waits for X."""
    result = simulate(
        parse_scenario(
            {
                "cluster": {
                    "nodes": [
                        {"prefix": "a", "count": 1, "gpus": 8, "gpu_model": "A"},
                        {"prefix": "b", "count": 1, "gpus": 8, "gpu_model": "B"},
                    ]
                },
                "queues": [{"name": "q", "capability": {"gpu": 15}}],
                "jobs": [
                    {
                        "name": "V",
                        "queue": "q",
                        "type": "debug",
                        "submit": 0,
                        "duration": 99_999,
                        "gpus_per_task": 4,
                        "gpu_model": "A",
                        "checkpoint_on_sigterm": False,
                    },
                    {
                        "name": "P",
                        "queue": "q",
                        "type": "critical",
                        "submit": 100,
                        "duration": 1000,
                        "gpus_per_task": 8,
                        "gpu_model": "A",
                    },
                    {
                        "name": "X",
                        "queue": "q",
                        "type": "normal",
                        "submit": 150,
                        "duration": 1000,
                        "gpus_per_task": 8,
                    },
                ],
                "until": 3000,
            }
        )
    )
    assert most_held(result, "q") <= 15


def test_capability_holds_when_two_critical_jobs_arrive_together() -> None:
    """Queue q, capability 7. a-0 (model A, 4 GPUs) holds V (debug, 2, no emergency
    checkpoint). P1 (critical, 4 × A) and P2 (critical, 4 × B) arrive at 100. P1 fits the cap
    (2 + 4 = 6) but not the room; P2 fits both (2 + 4 = 6) and starts on b-0; P1 then evicts V
    and would start at 220 beside P2: 4 + 4 = 8 > 7. Whichever goes first, q stays ≤ 7."""
    result = simulate(
        parse_scenario(
            {
                "cluster": {
                    "nodes": [
                        {"prefix": "a", "count": 1, "gpus": 4, "gpu_model": "A"},
                        {"prefix": "b", "count": 1, "gpus": 4, "gpu_model": "B"},
                    ]
                },
                "queues": [{"name": "q", "capability": {"gpu": 7}}],
                "jobs": [
                    {
                        "name": "V",
                        "queue": "q",
                        "type": "debug",
                        "submit": 0,
                        "duration": 99_999,
                        "gpus_per_task": 2,
                        "gpu_model": "A",
                        "checkpoint_on_sigterm": False,
                    },
                    {
                        "name": "P1",
                        "queue": "q",
                        "type": "critical",
                        "submit": 100,
                        "duration": 1000,
                        "gpus_per_task": 4,
                        "gpu_model": "A",
                    },
                    {
                        "name": "P2",
                        "queue": "q",
                        "type": "critical",
                        "submit": 100,
                        "duration": 1000,
                        "gpus_per_task": 4,
                        "gpu_model": "B",
                    },
                ],
                "until": 3000,
            }
        )
    )
    assert most_held(result, "q") <= 7
