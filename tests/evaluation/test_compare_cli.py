"""`caldera compare`, `caldera demo` and `caldera bench sim` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from evaluation_support import excerpt
from typer.testing import CliRunner

from caldera.cli.main import app
from caldera.policies import policy_names
from caldera.report import TARGETS, order_policies, run_policies
from caldera.sim import load_scenario

runner = CliRunner()
SUMMARY_KEYS = {
    "critical_sla_attainment",
    "wasted_gpu_hours_per_day",
    "gang_hang_events_per_week",
    "gpu_utilization",
    "large_job_sla_attainment",
    "large_job_wait_p95",
    "large_job_wait_max",
    "preemptions",
    "preemptions_by_victim",
    "preemptions_by_preemptor",
    "critical_preempted",
}


@pytest.fixture()
def small_pool(tmp_path: Path, philly: Path) -> Path:
    """Half a day of a 64-GPU pool from the production generator (a few hundred jobs)."""
    path = tmp_path / "pool.yaml"
    generator = {
        "kind": "production",
        "seed": 3,
        "days": 0.5,
        "nodes": 8,
        "nodes_per_tier1": 4,
        "production": {"gpus": [16, 32], "weights": [1, 1], "per_day": 10},
        "research": {"per_day": 150, "runtimes": str(philly)},
        "inference": {"per_day": 20},
        "debug": {"per_day": 30},
    }
    path.write_text(yaml.safe_dump({"workload": {"generators": [generator]}, "until": 43_200}))
    return path


def one_line_error(result: Any) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("caldera: error: ")
    return lines[0]


def test_compare_json_shape(small_pool: Path) -> None:
    policies = [p for p in ("caldera", "fifo", "volcano") if p in policy_names()]
    result = runner.invoke(
        app, ["compare", str(small_pool), "--policies", ",".join(policies), "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["policies"] == policies
    assert document["gpus"] == 64 and document["jobs"] > 50
    assert set(document["targets"]) == {t.key for t in TARGETS}
    assert list(document["results"]) == policies
    for entry in document["results"].values():
        assert set(entry["summary"]) >= SUMMARY_KEYS
        assert set(entry["meets_targets"]) == {t.key for t in TARGETS}
        assert "sla_attainment" in entry["metrics"]
    caldera = document["results"]["caldera"]["summary"]
    assert caldera["critical_preempted"] == 0 and caldera["gang_hang_events_per_week"] == 0
    assert 0 < caldera["gpu_utilization"] <= 1


def test_same_job_list_for_every_policy(small_pool: Path) -> None:
    scenario = load_scenario(small_pool)
    policies = order_policies(None, policy_names())
    assert policies[0] == "caldera" and set(policies) == set(policy_names())
    runs = list(run_policies(scenario, policies))
    assert [run.policy for run in runs] == policies
    submitted = {run.policy: sorted(j["name"] for j in run.result["jobs"]) for run in runs}
    assert all(names == submitted["caldera"] for names in submitted.values())
    assert all(run.series and run.gpus == 64 for run in runs)


def test_compare_table_and_report(small_pool: Path, tmp_path: Path) -> None:
    report = tmp_path / "report"
    result = runner.invoke(
        app, ["compare", str(small_pool), "--policies", "caldera", "--report", str(report)]
    )
    assert result.exit_code == 0, result.output
    for label in ("critical SLA attainment", "GPU-hours wasted per day", "GPU utilization"):
        assert label in result.stdout
    names = {p.name for p in report.iterdir()}
    assert {
        "index.html",
        "utilization.png",
        "wait_cdf.png",
        "lost_gpu_hours.png",
        "comparison.json",
        "table.md",
    } <= names
    for png in ("utilization.png", "wait_cdf.png", "lost_gpu_hours.png"):
        data = (report / png).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5_000
    page = (report / "index.html").read_text()
    assert all(f'src="{png}"' in page for png in ("utilization.png", "wait_cdf.png"))
    assert "<table>" in page and "caldera" in page
    table = (report / "table.md").read_text()
    assert table.startswith("| metric | caldera |")
    assert json.loads((report / "comparison.json").read_text())["policies"] == ["caldera"]


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--policies", "caldera,nosuch"], "unknown policy 'nosuch'"),
        (["--policies", ","], "--policies is empty"),
    ],
    ids=["unknown policy", "empty list"],
)
def test_bad_policies_are_one_line_errors(small_pool: Path, args: list[str], want: str) -> None:
    result = runner.invoke(app, ["compare", str(small_pool), *args])
    assert result.exit_code == 2
    assert want in one_line_error(result)


def test_bad_file_is_a_one_line_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("cluster: [unclosed\n")
    for path in (broken, tmp_path / "missing.yaml"):
        result = runner.invoke(app, ["compare", str(path), "--policies", "caldera"])
        assert result.exit_code == 2
        assert str(path) in one_line_error(result)


def test_unwritable_report_is_a_one_line_error(small_pool: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = runner.invoke(
        app, ["compare", str(small_pool), "--policies", "fifo", "--report", str(blocker)]
    )
    assert result.exit_code == 2
    assert "cannot write the report" in one_line_error(result)


def test_bundled_scenarios_are_the_seeds_pool() -> None:
    from importlib import resources

    for name, days in (("demo.yaml", 3), ("production-14d.yaml", 14)):
        with resources.as_file(resources.files("caldera").joinpath("examples", name)) as path:
            scenario = load_scenario(path)
        assert sum(n.gpus for n in scenario.nodes) == 512
        assert {q.name for q in scenario.queues} == {"prod", "serving", "research", "dev"}
        # One day of warm-up, then `days` measured days.
        assert scenario.warmup == 86_400
        assert scenario.until == (days + 1) * 86_400
        assert max(s.spec.submit for s in scenario.submissions) < (days + 1) * 86_400


def test_demo_runs_prints_the_table_and_writes_the_report(tmp_path: Path) -> None:
    report = tmp_path / "demo"
    result = runner.invoke(app, ["demo", "--policies", "fifo", "--report", str(report), "-q"])
    assert result.exit_code == 0, result.output
    assert "critical SLA attainment" in result.stdout
    assert (report / "index.html").is_file() and (report / "table.md").is_file()


def test_bench_sim_synthetic_json() -> None:
    result = runner.invoke(
        app, ["bench", "sim", "--workload", "synthetic", "--jobs", "300", "--nodes", "8", "--json"]
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["workload"] == "synthetic" and row["jobs"] == 300 and row["gpus"] == 64
    # Every job is submitted and then starts and finishes, or (a gang larger than the 64-GPU
    # pool) is rejected.
    assert row["run_s"] > 0 and row["events"] >= 2 * 300


def test_bench_sim_openb_on_an_excerpt(tmp_path: Path, openb: Path) -> None:
    excerpt(openb / "openb_node_list_gpu_node.csv", tmp_path / "openb_node_list_gpu_node.csv", 50)
    excerpt(openb / "openb_pod_list_default.csv", tmp_path / "pods.csv", 200)
    result = runner.invoke(
        app,
        ["bench", "sim", "--workload", "openb", "--traces", str(tmp_path), "--pods", "pods.csv"],
    )
    assert result.exit_code == 0, result.output
    assert "openb" in result.stdout and "200" in result.stdout


def test_bench_sim_rejects_unknown_workload() -> None:
    result = runner.invoke(app, ["bench", "sim", "--workload", "pai"])
    assert result.exit_code == 2
    assert "unknown workload" in one_line_error(result)
