"""`caldera compare FILE --policies caldera,volcano,priority-kill,fifo [--json] [--report DIR]`.

The same job list goes through every policy; the seeds' table is printed with one column per
policy (critical SLA attainment, GPU-hours wasted per day, gang-hang events per week, GPU
utilization, then large-job waits and preemptions by type). `--report DIR` writes an HTML page
with PNG figures. A progress bar per policy shows on stderr when a person is watching.

The policies run in parallel processes, `--jobs` at a time (default: one per CPU;
cli/compare_runs.py), and the output is the serial run's. A policy that fails costs only its
own column: the others are printed, then a one-line error names it (exit 1).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from caldera.cli.compare_runs import PolicyFailure, default_jobs, run_in_parallel
from caldera.cli.errors import EXIT_BAD_INPUT, EXIT_FAILURE, fail
from caldera.policies import policy_names
from caldera.report import (
    ROWS,
    TARGETS,
    PolicyRun,
    comparison_document,
    order_policies,
    summarize,
)
from caldera.report.summary import format_row
from caldera.sim import Scenario, ScenarioError, load_scenario

__all__ = ["comparison_table", "parse_policies", "register", "run_comparison"]


def parse_policies(text: str | None) -> list[str]:
    """`a,b,c` → the policies in that order; unknown names are a one-line error (exit 2)."""
    known = policy_names()
    requested = [p.strip() for p in (text or "").split(",") if p.strip()]
    unknown = [p for p in requested if p not in known]
    if unknown:
        fail(f"unknown policy {unknown[0]!r} (known: {', '.join(known)})", EXIT_BAD_INPUT)
    if text is not None and not requested:
        fail("--policies is empty (give e.g. caldera,volcano)", EXIT_BAD_INPUT)
    return order_policies(requested, known)


def comparison_table(runs: Sequence[PolicyRun], title: str) -> Table:
    targets = {t.key: t for t in TARGETS}
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.policy, justify="right")
    table.add_column("seeds' before", justify="right", style="dim")
    table.add_column("target (after)", justify="right", style="dim")
    summaries = [summarize(run.result) for run in runs]
    for row in ROWS:
        target = targets.get(row.key)
        cells = []
        for summary in summaries:
            text = format_row(row, summary)
            met = target.met(summary.get(row.key)) if target else None
            cells.append(text if met is None else f"[{'green' if met else 'red'}]{text}[/]")
        table.add_row(
            row.label,
            *cells,
            row.fmt(target.before) if target else "",
            f"{target.op} {row.fmt(target.after)}" if target else "",
        )
    return table


def run_comparison(
    scenario: Scenario, policies: Sequence[str], quiet: bool, jobs: int = 1
) -> list[PolicyRun]:
    """Every policy's run, `jobs` processes at a time; a failed policy is a one-line error."""
    runs, failures = run_in_parallel(scenario, policies, jobs, quiet)
    if failures:
        _fail_policies(failures)
    return runs


def _fail_policies(failures: Sequence[PolicyFailure]) -> None:
    fail("; ".join(str(failure) for failure in failures), EXIT_FAILURE)


def _command_line() -> str:
    return "caldera " + " ".join(shlex.quote(arg) for arg in sys.argv[1:])


def write_outputs(
    scenario: Scenario,
    runs: Sequence[PolicyRun],
    json_output: bool,
    report: Path | None,
    quiet: bool,
) -> None:
    """Print the table (or the JSON document) and write the report if asked."""
    command = _command_line()
    if report is not None:
        from caldera.report import write_report

        try:
            index = write_report(report, scenario.name, runs, command)
        except OSError as error:
            fail(f"cannot write the report to {report}: {error.strerror or error}", EXIT_BAD_INPUT)
    if json_output:
        document = comparison_document(scenario.name, runs, command)
        sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
        return
    # A pipe or a log gets the whole table on one screen width rather than wrapped cells.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    jobs = len(runs[0].result["jobs"]) if runs else 0
    gpus = runs[0].gpus if runs else 0
    console.print(comparison_table(runs, f"{scenario.name}: {jobs} jobs on {gpus:g} GPUs"))
    if report is not None and not quiet:
        console.print(f"report: {index}")


def register(app: typer.Typer) -> None:
    @app.command()
    def compare(
        file: Annotated[Path, typer.Argument(help="Scenario file (YAML or JSON, DESIGN §6).")],
        policies: Annotated[
            str | None,
            typer.Option(
                help="Comma-separated policies, in column order (default: every registered "
                "policy, caldera first)."
            ),
        ] = None,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the comparison as one JSON document.")
        ] = False,
        report: Annotated[
            Path | None,
            typer.Option(help="Write an HTML report with PNG figures into this folder."),
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
        jobs: Annotated[
            int | None,
            typer.Option(
                "--jobs",
                "-j",
                help="Policies run in parallel processes, this many at a time (default: one "
                "per CPU; 1: one after the other in this process). The output is the same.",
            ),
        ] = None,
        runtime: Annotated[
            str,
            typer.Option(
                help="sim: the simulator (default). k8s: replay on a real control plane "
                "(dev cluster, KWOK nodes) beside the simulator's prediction "
                "(docs/evaluation.md, Against the real Volcano)."
            ),
        ] = "sim",
        modes: Annotated[
            str | None,
            typer.Option(
                help="--runtime k8s: volcano, caldera-volcano, caldera (default: those that "
                "can run; the first two need the real Volcano: make cluster-bins)."
            ),
        ] = None,
        compress: Annotated[
            float,
            typer.Option(help="--runtime k8s: divide the scenario's time by this factor."),
        ] = 60.0,
        until: Annotated[
            float | None,
            typer.Option(help="--runtime k8s: replay only up to this scenario time (seconds)."),
        ] = None,
        volcano_period: Annotated[
            float,
            typer.Option(help="--runtime k8s: seconds between vc-scheduler's cycles (wall)."),
        ] = 1.0,
    ) -> None:
        """Run the same job list through several policies and print the seeds' table."""
        if runtime not in ("sim", "k8s"):
            fail(f"unknown runtime {runtime!r} (sim or k8s)", EXIT_BAD_INPUT)
        chosen = parse_policies(policies) if runtime == "sim" else []
        if jobs is not None and jobs < 1:
            fail(f"--jobs must be at least 1 (got {jobs})", EXIT_BAD_INPUT)
        try:
            scenario = load_scenario(file)
        except ScenarioError as error:
            fail(str(error), EXIT_BAD_INPUT)
        if runtime == "k8s":
            from caldera.cli.compare_k8s import run_k8s_comparison

            run_k8s_comparison(
                scenario, modes, compress, until, json_output, report, quiet, volcano_period
            )
            return
        workers = default_jobs() if jobs is None else jobs
        runs, failures = run_in_parallel(scenario, chosen, workers, quiet)
        if runs:
            write_outputs(scenario, runs, json_output, report, quiet)
        if failures:
            _fail_policies(failures)
