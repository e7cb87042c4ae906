"""The replay harness (caldera.replay.kube) on the real control plane: a scenario compressed
60 times, replayed by caldera's controller with kube-scheduler on KWOK nodes, measured from the
API server, and set beside the simulator's prediction of the same compressed scenario.

The Volcano modes run on the real Volcano `make cluster-bins` builds from the Go module proxy
(scripts/volcano-bins.sh; or the one CALDERA_VOLCANO_SCHEDULER names): wherever it is built,
and always under CI=true, where a Volcano missing fails them (conftest's `volcano_bins`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from caldera.devcluster.volcano import VolcanoBins
from caldera.replay.fidelity import compare, predict
from caldera.replay.kube import KubeRun, replay
from caldera.replay.modes import MODES
from caldera.sim import load_scenario

SCENARIO = Path(__file__).resolve().parents[1] / "replay" / "replay-small.yaml"
FACTOR = 60.0


def _states(run: KubeRun) -> dict[str, tuple[str, int]]:
    return {job["name"]: (job["state"], job["evictions"]) for job in run.result["jobs"]}


def test_a_replay_with_calderas_controller_matches_the_simulators_prediction(
    cluster_bins: Path,
) -> None:
    scenario = load_scenario(SCENARIO)
    prediction = predict(scenario, "caldera", FACTOR)
    run = replay(scenario, MODES["caldera"], FACTOR, bins=cluster_bins)
    # every job ran to its end; the critical job reclaimed r2 (once), which came back
    assert _states(run) == {
        "r1": ("Succeeded", 0),
        "r2": ("Succeeded", 1),
        "c1": ("Succeeded", 0),
        "n1": ("Succeeded", 0),
    }
    fidelity = compare(
        "sim", prediction.result, prediction.start_order, prediction.victims,
        "k8s", run.result, run.start_order, run.victims,
    )  # fmt: skip
    assert prediction.start_order == ["r1", "r2", "c1", "n1"]
    assert fidelity.same_order, (prediction.start_order, run.start_order)
    assert fidelity.same_victims and fidelity.victims_b == {"r2": 1}
    # starts within 10 s of wall time of the prediction (600 s of scenario time): the
    # controller's cycle, the binding and the watch, on a machine the suite shares
    assert fidelity.start_delta["jobs"] == 4
    assert fidelity.start_delta["max"] is not None and fidelity.start_delta["max"] <= 600
    metrics = run.result["metrics"]
    # the critical job waited for one eviction (r2 exits at once on SIGTERM): seconds of wall
    # time, not the 1 s its 60 s SLO compresses to (docs/evaluation.md: compression's caveats)
    assert metrics["wait"]["critical"]["max"] <= 5 * FACTOR
    assert metrics["preemptions"]["by_victim_type"] == {"normal": 1}
    assert 0 < metrics["gpu_utilization"] <= 1
    # what the watch saw agrees with the API server's whole-second timestamps
    assert run.skew["samples"] >= 4 and run.skew["max"] <= 2.0


@pytest.mark.parametrize("mode", ["volcano", "caldera-volcano"])
def test_a_replay_under_the_real_volcano_runs_every_job(
    cluster_bins: Path, volcano_bins: VolcanoBins, mode: str
) -> None:
    scenario = load_scenario(SCENARIO)
    run = replay(scenario, MODES[mode], FACTOR, volcano=volcano_bins, bins=cluster_bins)
    assert {state for state, _ in _states(run).values()} == {"Succeeded"}, _states(run)
    assert set(run.start_order) == {"r1", "r2", "c1", "n1"}
    assert run.result["metrics"]["sla_attainment"]["critical"] is not None
