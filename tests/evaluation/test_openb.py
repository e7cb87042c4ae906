"""The OpenB loader on excerpts cut from ../shared/traces/openb at test time."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from evaluation_support import excerpt

from caldera.model import JobType
from caldera.sim import ScenarioError, load_scenario, simulate
from caldera.sim.openb import CPU_ONLY_MODEL, QOS_TYPES


def write_scenario(folder: Path, trace: dict[str, Any], **extra: Any) -> Path:
    path = folder / "trace.yaml"
    path.write_text(yaml.safe_dump({"workload": {"trace": {"format": "openb", **trace}}, **extra}))
    return path


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture()
def small(tmp_path: Path, openb: Path) -> Path:
    """60 GPU nodes and the first 400 pods of the default list, beside a scenario file."""
    excerpt(openb / "openb_node_list_gpu_node.csv", tmp_path / "nodes.csv", 60)
    excerpt(openb / "openb_pod_list_default.csv", tmp_path / "pods.csv", 400)
    return tmp_path


def test_nodes_keep_trace_names_and_hardware(small: Path) -> None:
    scenario = load_scenario(write_scenario(small, {"nodes": "nodes.csv", "pods": "pods.csv"}))
    source = {r["sn"]: r for r in rows(small / "nodes.csv")}
    assert {n.name for n in scenario.nodes} == set(source)
    for node in scenario.nodes:
        row = source[node.name]
        assert (node.gpus, node.gpu_model) == (int(row["gpu"]), row["model"])
        assert (node.cpu, node.memory) == (int(row["cpu_milli"]), int(row["memory_mib"]))
        assert node.island_size == node.gpus  # no topology in the trace: one island per node


def test_tier1_domains_hold_nodes_of_one_kind(small: Path) -> None:
    path = write_scenario(small, {"nodes": "nodes.csv", "pods": "pods.csv", "nodes_per_tier1": 4})
    scenario = load_scenario(path)
    domains: dict[int, list[Any]] = {}
    for node in scenario.nodes:
        domains.setdefault(node.tier1, []).append(node)
    assert all(len(members) <= 4 for members in domains.values())
    assert all(len({(n.gpu_model, n.gpus) for n in members}) == 1 for members in domains.values())


def test_pods_become_single_task_jobs(small: Path) -> None:
    scenario = load_scenario(write_scenario(small, {"nodes": "nodes.csv", "pods": "pods.csv"}))
    specs = {s.spec.name: s.spec for s in scenario.submissions}
    source = rows(small / "pods.csv")
    assert len(specs) == len(source)
    for row in source:
        spec = specs[row["name"]]
        num_gpu, milli = int(row["num_gpu"]), int(row["gpu_milli"])
        want_gpu = milli if num_gpu == 1 and milli < 1000 else num_gpu * 1000
        assert spec.tasks == 1
        assert spec.gpu == want_gpu
        assert spec.cpu == int(row["cpu_milli"]) and spec.memory == int(row["memory_mib"])
        assert spec.type is QOS_TYPES.get(row["qos"], JobType.NORMAL)
        assert spec.submit == float(row["creation_time"])
        assert spec.duration == max(float(row["deletion_time"]) - float(row["creation_time"]), 0)
        assert spec.queue == "openb"
        assert spec.checkpoint.interval is None and not spec.checkpoint.on_sigterm
    assert {q.name for q in scenario.queues} == {"openb"}
    # The excerpt does exercise sharing and several job types.
    assert any(0 < s.gpu < 1000 for s in specs.values())
    assert {s.type for s in specs.values()} >= {JobType.CRITICAL, JobType.DEBUG}


def test_gpu_spec_becomes_a_model_constraint(tmp_path: Path, openb: Path) -> None:
    source = openb / "openb_pod_list_gpuspec33.csv"
    constrained = [r for r in rows(source) if "|" in r["gpu_spec"]][:20]
    pods = excerpt(source, tmp_path / "pods.csv", 0, keep={r["name"] for r in constrained})
    excerpt(openb / "openb_node_list_gpu_node.csv", tmp_path / "nodes.csv", 1213)
    scenario = load_scenario(write_scenario(tmp_path, {"nodes": "nodes.csv", "pods": pods.name}))
    by_name = {s.spec.name: s.spec for s in scenario.submissions}
    for row in constrained:
        assert by_name[row["name"]].gpu_models == frozenset(row["gpu_spec"].split("|"))
    result = simulate(scenario)
    models = {n.name: n.gpu_model for n in scenario.nodes}
    for event in result["events"]:
        if event["kind"] == "start":
            allowed = by_name[event["job"]].gpu_models
            assert allowed is not None
            assert all(models[node] in allowed for node in event["placement"])


def test_options_limit_scale_qos_map_and_cpu_only(small: Path) -> None:
    trace = {
        "nodes": "nodes.csv",
        "pods": "pods.csv",
        "limit": 50,
        "time_scale": 0.5,
        "qos_map": {"BE": "normal"},
        "queue": "batch",
        "cpu_only": "skip",
    }
    scenario = load_scenario(write_scenario(small, trace))
    source = [r for r in rows(small / "pods.csv") if int(r["num_gpu"]) > 0][:50]
    assert [s.spec.name for s in sorted(scenario.submissions, key=lambda s: s.spec.name)] == [
        r["name"] for r in sorted(source, key=lambda r: r["name"])
    ]
    first = next(s.spec for s in scenario.submissions if s.spec.name == source[0]["name"])
    assert first.submit == float(source[0]["creation_time"]) * 0.5
    assert all(s.spec.gpu > 0 for s in scenario.submissions)
    assert JobType.DEBUG not in {s.spec.type for s in scenario.submissions}
    assert {s.spec.queue for s in scenario.submissions} == {"batch"}


def test_cpu_only_nodes_and_pods(tmp_path: Path, openb: Path) -> None:
    all_nodes = openb / "openb_node_list_all_node.csv"
    cpu_rows = [r for r in rows(all_nodes) if r["gpu"] == "0"][:3]
    excerpt(all_nodes, tmp_path / "nodes.csv", 0, keep={r["sn"] for r in cpu_rows})
    pod_rows = [r for r in rows(openb / "openb_pod_list_default.csv") if r["num_gpu"] == "0"][:5]
    excerpt(
        openb / "openb_pod_list_default.csv",
        tmp_path / "pods.csv",
        0,
        keep={r["name"] for r in pod_rows},
    )
    scenario = load_scenario(write_scenario(tmp_path, {"nodes": "nodes.csv", "pods": "pods.csv"}))
    assert {n.gpu_model for n in scenario.nodes} == {CPU_ONLY_MODEL}
    assert all(n.gpus == 0 for n in scenario.nodes)
    result = simulate(scenario)
    started = {e["job"] for e in result["events"] if e["kind"] == "start"}
    assert started == {r["name"] for r in pod_rows}


def test_timeless_list_borrows_times_by_name(tmp_path: Path, openb: Path) -> None:
    """multigpu20 has no time (nor qos) columns: its pods take the default list's by name,
    and pods missing there take a seeded draw from the others."""
    every_default = rows(openb / "openb_pod_list_default.csv")
    default = every_default[:30]
    named = {r["name"] for r in every_default}
    extra = [r for r in rows(openb / "openb_pod_list_multigpu20.csv") if r["name"] not in named]
    extra = extra[:5]
    assert extra, "multigpu20 adds pods the default list lacks"
    keep = {r["name"] for r in default} | {r["name"] for r in extra}
    excerpt(openb / "openb_pod_list_multigpu20.csv", tmp_path / "multi.csv", 0, keep=keep)
    excerpt(openb / "openb_pod_list_default.csv", tmp_path / "times.csv", 30)
    excerpt(openb / "openb_node_list_gpu_node.csv", tmp_path / "nodes.csv", 100)
    trace = {"nodes": "nodes.csv", "pods": "multi.csv", "times": "times.csv", "seed": 3}
    first = load_scenario(write_scenario(tmp_path, trace))
    again = load_scenario(write_scenario(tmp_path, trace))
    specs = {s.spec.name: s.spec for s in first.submissions}
    for row in default:
        assert specs[row["name"]].submit == float(row["creation_time"])
    for row in default:  # multigpu20 has no qos column: the type comes from the default list
        assert specs[row["name"]].type is QOS_TYPES.get(row["qos"], JobType.NORMAL)
    known_times = {float(r["creation_time"]) for r in default}
    for row in extra:
        assert specs[row["name"]].submit in known_times
        assert specs[row["name"]].gpu == int(row["num_gpu"]) * 1000
    assert [s.spec for s in first.submissions] == [s.spec for s in again.submissions]


def test_timeless_list_without_times_is_a_one_line_error(tmp_path: Path, openb: Path) -> None:
    excerpt(openb / "openb_pod_list_multigpu20.csv", tmp_path / "multi.csv", 10)
    excerpt(openb / "openb_node_list_gpu_node.csv", tmp_path / "nodes.csv", 10)
    with pytest.raises(ScenarioError) as error:
        load_scenario(write_scenario(tmp_path, {"nodes": "nodes.csv", "pods": "multi.csv"}))
    message = str(error.value)
    assert "\n" not in message and "trace.times" in message


@pytest.mark.parametrize(
    ("trace", "want"),
    [
        ({"nodes": "nodes.csv", "pods": "missing.csv"}, "no such file"),
        ({"nodes": "nodes.csv", "pods": "pods.csv", "format": "pai"}, "workload.trace.format"),
        ({"nodes": "nodes.csv", "pods": "pods.csv", "shuffle": True}, "unknown key"),
    ],
    ids=["missing file", "unknown format", "unknown option"],
)
def test_bad_trace_options_are_one_line_errors(
    small: Path, trace: dict[str, Any], want: str
) -> None:
    with pytest.raises(ScenarioError) as error:
        load_scenario(write_scenario(small, trace))
    assert want in str(error.value) and "\n" not in str(error.value)


def test_excerpt_replays_and_matches_the_output_schema(small: Path, shared: Path) -> None:
    schema = json.loads((shared / "schemas" / "simulate-output.schema.json").read_text())
    scenario = load_scenario(write_scenario(small, {"nodes": "nodes.csv", "pods": "pods.csv"}))
    result = simulate(scenario)
    jsonschema.validate(result, schema)
    assert result["metrics"]["critical_preempted"] == 0
    assert len(result["jobs"]) == len(scenario.submissions)


def test_pods_on_a_declared_cluster(small: Path) -> None:
    """Without `nodes`, the scenario's own cluster hosts the trace's pods."""
    path = write_scenario(
        small,
        {"pods": "pods.csv", "limit": 40},
        cluster={"nodes": [{"prefix": "a", "count": 4, "gpus": 8, "cpu": 128}]},
    )
    scenario = load_scenario(path)
    assert [n.name for n in scenario.nodes] == ["a-0", "a-1", "a-2", "a-3"]
    result = simulate(scenario)
    assert len(result["jobs"]) == 40
    assert all(
        j["state"] in ("Succeeded", "Running", "Pending", "Rejected") for j in result["jobs"]
    )
    assert any(j["state"] == "Succeeded" for j in result["jobs"])
