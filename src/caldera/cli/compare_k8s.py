"""`caldera compare --runtime k8s FILE`: the scenario replayed on a real control plane.

Each mode gets a fresh dev cluster (caldera.devcluster) with the scenario's nodes as KWOK
nodes, replays the scenario with time divided by `--compress`, and is measured from what the
API server showed (caldera.replay.kube). Beside each, the simulator's prediction for the same
compressed scenario (caldera.replay.fidelity). Printed: the seeds' table, one column per run,
then how far each replay is from its prediction.

Modes: `volcano` (the real vc-scheduler as seed 001, users submitting Volcano Jobs),
`caldera-volcano` (caldera's controller in front of the real vc-scheduler) and `caldera`
(caldera's controller with kube-scheduler). The first two need the real Volcano (the one
`make cluster-bins` builds from the Go module proxy, or CALDERA_VOLCANO_SCHEDULER and
CALDERA_VOLCANO_CRDS: docs/evaluation.md); without it they are left out with one line, and
`caldera` runs alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from caldera.cli.compare import _command_line, comparison_table
from caldera.cli.errors import EXIT_BAD_INPUT, EXIT_FAILURE, fail, stderr
from caldera.config import Scenario
from caldera.devcluster import DevClusterError, find_bins
from caldera.devcluster.volcano import VolcanoBins, find_volcano
from caldera.errors import ScenarioError
from caldera.replay.compress import compress
from caldera.replay.fidelity import Fidelity, Prediction, compare, predict
from caldera.replay.kube import KubeRun, replay
from caldera.replay.modes import MODES, Mode
from caldera.report import PolicyRun, comparison_document

__all__ = ["run_k8s_comparison"]


def _modes(text: str | None, volcano: VolcanoBins | None) -> list[Mode]:
    if text is None:
        chosen = [m for m in MODES.values() if volcano is not None or not m.needs_volcano]
        if volcano is None:
            stderr.print(
                "caldera: no Volcano (make cluster-bins builds it, or set "
                "CALDERA_VOLCANO_SCHEDULER): replaying with caldera + kube-scheduler only",
                markup=False,
            )
        return chosen
    picked = []
    for key in (k.strip() for k in text.split(",") if k.strip()):
        mode = MODES.get(key)
        if mode is None:
            fail(f"unknown mode {key!r} (known: {', '.join(MODES)})", EXIT_BAD_INPUT)
        if mode.needs_volcano and volcano is None:
            fail(
                f"mode {key} needs the real Volcano: run make cluster-bins, or set "
                "CALDERA_VOLCANO_SCHEDULER and CALDERA_VOLCANO_CRDS (docs/evaluation.md)",
                EXIT_BAD_INPUT,
            )
        picked.append(mode)
    if not picked:
        fail("--modes is empty (give e.g. volcano,caldera)", EXIT_BAD_INPUT)
    return picked


def _version(volcano: VolcanoBins | None) -> str | None:
    if volcano is None:
        return None
    try:
        done = subprocess.run(
            [str(volcano.scheduler), "--version"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return "; ".join(lines[:4]) or None


def _policy_run(label: str, result: dict[str, Any], series: Any, gpus: float, wall: float,
                warmup: float) -> PolicyRun:  # fmt: skip
    result = {**result, "policy": label}
    return PolicyRun(label, result, tuple(series), gpus, wall, warmup)


def run_k8s_comparison(
    scenario: Scenario,
    modes_text: str | None,
    factor: float,
    until: float | None,
    json_output: bool,
    report: Path | None,
    quiet: bool,
    volcano_period: float,
) -> None:
    if until is not None:
        scenario = replace(scenario, until=until)
    try:
        compress(scenario, factor)  # refuse what cannot be replayed before starting anything
    except ScenarioError as error:
        fail(str(error), EXIT_BAD_INPUT)
    try:
        volcano = find_volcano()
    except DevClusterError as error:
        fail(str(error), EXIT_BAD_INPUT)
    modes = _modes(modes_text, volcano)
    try:
        bins = find_bins()
    except DevClusterError as error:
        fail(str(error), EXIT_FAILURE)
    gpus = float(sum(n.gpus for n in scenario.nodes))
    warmup = scenario.warmup
    console = Console(stderr=True)
    predictions: dict[str, Prediction] = {}
    for policy in dict.fromkeys(m.policy for m in modes):
        predictions[policy] = predict(scenario, policy, factor, f"sim: {policy}")
    runs: list[KubeRun] = []
    for mode in modes:
        if not quiet:
            console.print(f"replaying under {mode.label} (time / {factor:g}) …")
        try:
            runs.append(
                replay(scenario, mode, factor, volcano=volcano, bins=bins,
                       volcano_period=volcano_period)
            )  # fmt: skip
        except (DevClusterError, RuntimeError) as error:
            fail(f"{mode.label}: {error}", EXIT_FAILURE)
    columns: list[PolicyRun] = []
    fidelity: list[Fidelity] = []
    for policy, prediction in predictions.items():
        columns.append(
            _policy_run(f"sim: {policy}", prediction.result, prediction.series, gpus,
                        prediction.wall_seconds, warmup)
        )  # fmt: skip
        for run in runs:
            if run.mode.policy != policy:
                continue
            columns.append(
                _policy_run(run.mode.label, run.result, run.series, gpus, run.wall_seconds, warmup)
            )
            fidelity.append(
                compare(
                    f"sim: {policy}", prediction.result, prediction.start_order,
                    prediction.victims, run.mode.label, run.result, run.start_order, run.victims,
                )
            )  # fmt: skip
    command = _command_line()
    version = _version(volcano)
    if report is not None:
        from caldera.report import write_report

        try:
            index = write_report(report, f"{scenario.name} (replayed, time / {factor:g})", columns,
                                 command)  # fmt: skip
            (report / "fidelity.json").write_text(
                json.dumps(_fidelity_document(fidelity, runs, factor, version), indent=1) + "\n"
            )
        except OSError as error:
            fail(f"cannot write the report to {report}: {error.strerror or error}", EXIT_BAD_INPUT)
    if json_output:
        document = comparison_document(scenario.name, columns, command)
        document["replay"] = _fidelity_document(fidelity, runs, factor, version)
        sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
        return
    out = Console() if sys.stdout.isatty() else Console(width=200)
    jobs = len(columns[0].result["jobs"]) if columns else 0
    out.print(
        comparison_table(
            columns,
            f"{scenario.name}: {jobs} jobs on {gpus:g} GPUs, replayed with time / {factor:g}",
        )
    )
    out.print(fidelity_table(fidelity, runs, factor))
    if version:
        out.print(f"Volcano: {version}")
    if report is not None and not quiet:
        out.print(f"report: {index}")


def _fidelity_document(
    fidelity: Sequence[Fidelity], runs: Sequence[KubeRun], factor: float, version: str | None
) -> dict[str, Any]:
    return {
        "compression": factor,
        "volcano": version,
        "fidelity": [f.as_dict() for f in fidelity],
        "runs": {
            run.mode.label: {
                "mode": run.mode.key,
                "wall_seconds": round(run.wall_seconds, 1),
                "api_timestamp_skew_seconds": run.skew,
                "start_order": run.start_order,
                "notes": run.notes,
            }
            for run in runs
        },
    }


def fidelity_table(fidelity: Sequence[Fidelity], runs: Sequence[KubeRun], factor: float) -> Table:
    skews = {run.mode.label: run.skew for run in runs}
    table = Table(title="replay vs the simulator's prediction (same compressed scenario)",
                  title_justify="left")  # fmt: skip
    for head in ("replay", "vs", "same start order", "order agreement", "same victims",
                 "victims only in sim / replay", "start Δ mean / p95 / max",
                 "API timestamp skew max"):  # fmt: skip
        table.add_column(head)
    for f in fidelity:
        delta = f.start_delta
        only = f"{_counts(f.victims_only_a)} / {_counts(f.victims_only_b)}"
        skew = skews.get(f.b, {})
        table.add_row(
            f.b,
            f.a,
            "yes" if f.same_order else f"no (from #{f.first_difference})",
            "-" if f.order_agreement is None else f"{f.order_agreement * 100:.1f} %",
            "yes" if f.same_victims else "no",
            only,
            " / ".join(
                "-" if delta[k] is None else f"{delta[k]:.0f} s" for k in ("mean", "p95", "max")
            ),
            f"{skew.get('max', 0.0):.2f} s wall = {skew.get('max', 0.0) * factor:.0f} s",
        )
    return table


def _counts(values: dict[str, int]) -> str:
    if not values:
        return "none"
    return ", ".join(f"{k}×{v}" if v > 1 else k for k, v in values.items())
