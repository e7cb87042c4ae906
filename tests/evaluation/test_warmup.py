"""`workload.warmup`: the metrics leave out the first seconds of a run (a pool filling up)."""

from __future__ import annotations

from typing import Any

from caldera.sim import parse_scenario, simulate


def run(warmup: float | None) -> dict[str, Any]:
    """One 8-GPU node. `a` holds all 8 GPUs over [0, 200); `b` (4 GPUs) waits for it,
    runs [200, 300); `c` (4 GPUs) is submitted at 250 and starts at once."""
    document: dict[str, Any] = {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 8}]},
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "a",
                "queue": "q",
                "type": "normal",
                "submit": 0,
                "duration": 200,
                "gpus_per_task": 8,
            },
            {
                "name": "b",
                "queue": "q",
                "type": "normal",
                "submit": 50,
                "duration": 100,
                "gpus_per_task": 4,
            },
            {
                "name": "c",
                "queue": "q",
                "type": "normal",
                "submit": 250,
                "duration": 50,
                "gpus_per_task": 4,
            },
        ],
        "until": 400,
    }
    if warmup is not None:
        document["workload"] = {"warmup": warmup}
    return simulate(parse_scenario(document))["metrics"]


def test_without_warmup_everything_counts() -> None:
    metrics = run(None)
    assert metrics["observed_seconds"] == 300  # the run ends with its last event
    assert metrics["wait"]["normal"]["count"] == 3
    # 8 GPUs × 200 s + 4 × 100 + 4 × 50 over 8 GPUs × 300 s
    assert metrics["gpu_utilization"] == round((1600 + 400 + 200) / 2400, 6)


def test_warmup_leaves_out_early_jobs_and_time() -> None:
    metrics = run(100)
    assert metrics["observed_seconds"] == 200
    # a and b were submitted in the warm-up: only c's wait counts.
    assert metrics["wait"]["normal"]["count"] == 1
    assert metrics["wait"]["normal"]["max"] == 0
    # From t = 100: 8 GPUs × 100 s, then b 4 × 100 s, c 4 × 50 s, over 8 GPUs × 200 s.
    assert metrics["gpu_utilization"] == round((800 + 400 + 200) / 1600, 6)


def test_evictions_in_the_warmup_do_not_count() -> None:
    document: dict[str, Any] = {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 8}]},
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "v",
                "queue": "q",
                "type": "normal",
                "submit": 0,
                "duration": 1000,
                "gpus_per_task": 8,
                "checkpoint_on_sigterm": False,
                "checkpoint_interval": 60,
            },
            {
                "name": "big",
                "queue": "q",
                "type": "large-job",
                "submit": 90,
                "duration": 100,
                "gpus_per_task": 8,
            },
        ],
        "workload": {"warmup": 500},
    }
    result = simulate(parse_scenario(document))
    metrics = result["metrics"]
    (evict,) = [e for e in result["events"] if e["kind"] == "evict"]
    assert evict["t"] < 500 and evict["lost_gpu_seconds"] > 0
    # The eviction happened in the warm-up: not counted as a preemption or as lost work.
    assert metrics["preemptions"]["total"] == 0
    assert metrics["wasted_gpu_hours"] == 0
    assert metrics["critical_preempted"] == 0
