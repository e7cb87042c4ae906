"""GPUs as they really are, in the simulator: time-sharing queues (seed 004's development
queues) and MIG slices (its production inference), through scenario files, `simulate` and
`compare` like any other scenario."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from caldera.model import JobSpec, JobType, Queue, time_share
from caldera.report.runs import run_policies
from caldera.sim import ScenarioError, load_scenario, parse_scenario, simulate

MIG_EXAMPLE = Path(__file__).parents[2] / "src" / "caldera" / "examples" / "mig-mixed.yaml"


@dataclass(frozen=True)
class Case:
    name: str
    tasks: int = 1
    gpu: int = 1000
    type: JobType = JobType.DEBUG
    ways: int = 4
    want_gpu: int = 250
    want_shared: int = 4


SHARING_CASES = [
    Case("a 1-GPU debug job shares"),
    Case("a 1-GPU normal job shares", type=JobType.NORMAL),
    Case("3 ways: a third each", ways=3, want_gpu=333, want_shared=3),
    Case("a gang never shares", tasks=2, want_gpu=1000, want_shared=0),
    Case("a multi-GPU task never shares", gpu=2000, want_gpu=2000, want_shared=0),
    Case("a large job never shares", type=JobType.LARGE, want_gpu=1000, want_shared=0),
    Case("a fraction stays a fraction", gpu=500, want_gpu=500, want_shared=0),
    Case("a queue without sharing", ways=0, want_gpu=1000, want_shared=0),
]


@pytest.mark.parametrize("case", SHARING_CASES, ids=[c.name for c in SHARING_CASES])
def test_which_jobs_time_share(case: Case) -> None:
    spec = JobSpec("j", "j", "dev", case.type, 0.0, tasks=case.tasks, gpu=case.gpu)
    shared = time_share(spec, Queue("dev", time_sharing=case.ways))
    assert (shared.gpu, shared.time_shared) == (case.want_gpu, case.want_shared)
    assert time_share(shared, Queue("dev", time_sharing=case.ways)) == shared  # idempotent


def dev_scenario(jobs: list[dict[str, Any]], ways: int = 4) -> dict[str, Any]:
    defaults = {"queue": "dev", "type": "debug", "submit": 0, "duration": 100}
    return {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 2}]},
        "queues": [{"name": "dev", "time_sharing": ways}],
        "jobs": [{**defaults, **j} for j in jobs],
    }


def starts(result: dict[str, Any]) -> dict[str, float]:
    return {e["job"]: e["t"] for e in result["events"] if e["kind"] == "start"}


def test_a_time_sharing_queue_puts_n_tasks_on_one_gpu() -> None:
    jobs = [{"name": f"d{i}"} for i in range(9)]
    result = simulate(parse_scenario(dev_scenario(jobs)))
    begun = starts(result)
    # 2 GPUs × 4 ways: eight run at once, each counted as a quarter GPU; the ninth waits.
    assert sorted(begun.values()) == [0.0] * 8 + [100.0]
    first = next(e for e in result["events"] if e["kind"] == "start")
    assert first["gpus"] == 0.25


def test_time_sharing_never_splits_a_training_gang() -> None:
    jobs = [
        {"name": "gang", "tasks": 2, "gpus_per_task": 1, "type": "normal"},
        {"name": "d0"},
    ]
    result = simulate(parse_scenario(dev_scenario(jobs)))
    gang = next(e for e in result["events"] if e["kind"] == "start" and e["job"] == "gang")
    assert gang["gpus"] == 2  # two whole GPUs
    assert starts(result)["d0"] == 100.0  # no GPU left to share until the gang ends


def test_without_time_sharing_nothing_changes() -> None:
    jobs = [{"name": f"d{i}"} for i in range(3)]
    plain = dev_scenario(jobs, ways=0)
    assert sorted(starts(simulate(parse_scenario(plain))).values()) == [0.0, 0.0, 100.0]


# -- MIG slices --------------------------------------------------------------------------------


def test_a_scenario_with_mig_nodes_simulates_like_any_other(shared: Path) -> None:
    schema = json.loads((shared / "schemas" / "simulate-output.schema.json").read_text())
    result = simulate(load_scenario(MIG_EXAMPLE))
    jsonschema.validate(result, schema)
    metrics = result["metrics"]
    assert metrics["critical_preempted"] == 0 and metrics["gang_hang_gpu_hours"] == 0
    svc = [e for e in result["events"] if e["kind"] == "start" and e["job"].startswith("svc")]
    assert len(svc) == 48
    # Each replica on one 1g.10gb slice of an A100, counted as 1/7 of a GPU (rounded down).
    assert all(
        e["gpus"] == 0.142 and set(e["placement"]) <= {f"a100-{i}" for i in range(4)} for e in svc
    )
    batch = next(e for e in result["events"] if e["kind"] == "start" and e["job"] == "batch0")
    assert batch["gpus"] == 0.856  # two 3g.40gb slices


def test_a_scenario_with_mig_nodes_compares_like_any_other() -> None:
    scenario = load_scenario(MIG_EXAMPLE)
    policies = ["caldera", "volcano", "priority-kill", "fifo"]
    runs = list(run_policies(scenario, policies))
    assert [r.policy for r in runs] == policies
    for run in runs:
        assert run.gpus == 32 + 4 * (4 + 2 * 0.994 + 2 * 0.856)  # H100s, A100s, slices
        states = {j["state"] for j in run.result["jobs"]}
        assert states <= {"Succeeded", "Running", "Pending"}, run.policy
        assert 0 < run.result["metrics"]["gpu_utilization"] <= 1


def mig_scenario(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    defaults = {"queue": "q", "type": "normal", "submit": 0, "duration": 100}
    return {
        "cluster": {
            "nodes": [
                {
                    "prefix": "a",
                    "count": 1,
                    "gpus": 2,
                    "gpu_model": "A100",
                    "mig": [{"gpus": 1, "slices": {"3g.40gb": 2}}],
                }
            ]
        },
        "queues": [{"name": "q"}],
        "jobs": [{**defaults, **j} for j in jobs],
    }


def test_slices_are_requested_by_profile_and_offered_by_node() -> None:
    jobs = [{"name": f"s{i}", "gpu_profile": "3g.40gb"} for i in range(3)]
    jobs.append({"name": "w", "gpus_per_task": 1})
    jobs.append({"name": "none", "gpu_profile": "1g.10gb"})
    result = simulate(parse_scenario(mig_scenario(jobs)))
    begun = starts(result)
    assert (begun["s0"], begun["s1"], begun["s2"], begun["w"]) == (0.0, 0.0, 100.0, 0.0)
    (reject,) = [e for e in result["events"] if e["kind"] == "reject"]
    assert reject["job"] == "none"  # no node offers 1g.10gb


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpu_profile": "9g.90gb"}, "jobs[0].gpu_profile: invalid MIG profile"),
        ({"gpu_profile": "3g.40gb", "gpus_per_task": 2}, None),
    ],
)
def test_bad_profiles_in_scenario_files(change: dict[str, Any], message: str | None) -> None:
    data = mig_scenario([{"name": "j", **change}])
    if message is not None:
        with pytest.raises(ScenarioError, match=re.escape(message)):
            parse_scenario(data)
        return
    result = simulate(parse_scenario(data))  # well-formed but contradictory: rejected
    (reject,) = [e for e in result["events"] if e["kind"] == "reject"]
    assert "gpu_profile or gpus_per_task" in reject["reason"]


def test_a_bad_mig_layout_is_a_file_error() -> None:
    data = mig_scenario([])
    data["cluster"]["nodes"][0]["mig"] = [{"gpus": 1, "slices": {"4g.40gb": 2}}]
    with pytest.raises(ScenarioError, match="need 8 compute slices"):
        parse_scenario(data)


# -- generators and traces declare MIG nodes ---------------------------------------------------


def test_the_production_generator_declares_mig_nodes_and_slice_jobs(shared: Path) -> None:
    del shared  # the research kind's run times come from ../shared
    pool = {
        "kind": "production",
        "days": 0.5,
        "nodes": 8,
        "mig_nodes": 2,
        "mig": [{"gpus": 4, "slices": {"1g.10gb": 7}}],
        "inference": {"profile_share": 0.5, "profiles": ["1g.10gb"]},
    }
    scenario = parse_scenario({"workload": {"generators": [pool]}}, Path(__file__).parent)
    sliced = [n for n in scenario.nodes if n.slices]
    assert len(sliced) == 2 and all(n.gpus == 4 and len(n.slices) == 28 for n in sliced)
    asking = [s.spec for s in scenario.submissions if s.spec.gpu_profile == "1g.10gb"]
    assert asking and all(s.type is JobType.CRITICAL and s.tasks == 1 for s in asking)
    result = simulate(scenario)
    assert result["metrics"]["critical_preempted"] == 0
    # Without MIG keys the generator draws exactly the jobs it drew before.
    plain = {k: v for k, v in pool.items() if k not in ("mig_nodes", "mig", "inference")}
    before = parse_scenario({"workload": {"generators": [plain]}}, Path(__file__).parent)
    with_mig = [s.spec for s in scenario.submissions if s.spec.gpu_profile is None]
    unsliced = {s.name for s in with_mig}
    assert [s.spec for s in before.submissions if s.spec.name in unsliced] == with_mig


def test_an_openb_trace_declares_mig_nodes_and_maps_shares_to_slices(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},64000,262144,8,G2\n" for i in range(3))
        + "t0,64000,262144,2,T4\n"
    )
    (tmp_path / "pods.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time\n"
        "small,1000,1024,1,100,,LS,0,100\n"
        "half,1000,1024,1,400,,LS,0,100\n"
        "big,1000,1024,1,900,,BE,0,100\n"
        "whole,1000,1024,2,1000,,BE,0,100\n"
    )
    trace = {
        "format": "openb",
        "nodes": "nodes.csv",
        "pods": "pods.csv",
        "mig": [
            {"model": "G2", "nodes": 2, "layout": [{"gpus": 2, "slices": {"1g.10gb": 7}}]},
            {"model": "G2", "nodes": 1, "layout": [{"gpus": 1, "slices": {"3g.40gb": 2}}]},
        ],
        "share_profiles": True,
    }
    scenario = parse_scenario({"workload": {"trace": trace}}, tmp_path)
    layout = {n.name: (n.gpus, len(n.slices)) for n in scenario.nodes}
    assert layout == {"n0": (6, 14), "n1": (6, 14), "n2": (7, 2), "t0": (2, 0)}
    profiles = {s.spec.name: s.spec.gpu_profile for s in scenario.submissions}
    assert profiles == {"small": "1g.10gb", "half": "3g.40gb", "big": None, "whole": None}
    result = simulate(scenario)
    assert {j["state"] for j in result["jobs"]} == {"Succeeded"}
    bad = {**trace, "mig": [{"model": "G2", "nodes": 9, "layout": trace["mig"][0]["layout"]}]}
    with pytest.raises(ScenarioError, match="9 nodes of model 'G2' asked, 3 in the trace"):
        parse_scenario({"workload": {"trace": bad}}, tmp_path)
