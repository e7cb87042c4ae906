"""`caldera bench sim`: simulator throughput on 20,000 synthetic jobs and the OpenB trace.

Registers itself on `caldera bench` when imported (figures go to docs/benchmarks.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from caldera.bench.sim import bench_scenario, burst_scenario, openb_scenario, synthetic_scenario
from caldera.cli.bench import bench_app
from caldera.cli.errors import EXIT_BAD_INPUT, fail
from caldera.cli.progress import sim_progress
from caldera.policies import policy_names
from caldera.sim import Scenario

__all__ = ["sim_command"]

_WORKLOADS = ("synthetic", "openb", "burst")


@bench_app.command("sim")
def sim_command(
    workload: Annotated[
        str, typer.Option(help="synthetic, openb, burst or all.", show_default=True)
    ] = "all",
    jobs: Annotated[int, typer.Option(help="Synthetic or burst jobs.")] = 20_000,
    nodes: Annotated[int, typer.Option(help="Synthetic or burst pool: nodes of 8 GPUs.")] = 813,
    seed: Annotated[int, typer.Option(help="Synthetic or burst workload seed.")] = 7,
    pods: Annotated[
        str, typer.Option(help="OpenB pod list (file name in the traces folder).")
    ] = "openb_pod_list_default.csv",
    traces: Annotated[
        Path | None, typer.Option(help="OpenB folder (default ../shared/traces/openb).")
    ] = None,
    policy: Annotated[str, typer.Option(help="Policy to simulate under.")] = "caldera",
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    breakdown: Annotated[
        bool,
        typer.Option(help="Also count and time the cycles by what woke them (a little slower)."),
    ] = False,
    floor: Annotated[
        bool,
        typer.Option(
            help="Then run it again on the recorded decisions, without the core: what the "
            "simulator itself costs (the floor of any core)."
        ),
    ] = False,
) -> None:
    """Time whole simulations: 20,000 jobs on 6,504 GPUs, a backlog burst, the OpenB trace."""
    if workload not in ("all", *_WORKLOADS):
        fail(f"unknown workload {workload!r} (synthetic, openb, burst or all)", EXIT_BAD_INPUT)
    if policy not in policy_names():
        fail(f"unknown policy {policy!r} (known: {', '.join(policy_names())})", EXIT_BAD_INPUT)
    if jobs < 1 or nodes < 1:
        fail("jobs and nodes must be positive", EXIT_BAD_INPUT)
    chosen = list(_WORKLOADS) if workload == "all" else [workload]
    results = []

    def watch(scenario: Scenario) -> AbstractContextManager[Callable[[float], None] | None]:
        return sim_progress(scenario, quiet)

    builders: dict[str, Callable[[], Scenario]] = {
        "synthetic": lambda: synthetic_scenario(jobs, nodes, seed),
        "burst": lambda: burst_scenario(jobs, nodes, seed),
        "openb": lambda: openb_scenario(pods, folder=traces),
    }
    for name in chosen:
        try:
            result = bench_scenario(name, builders[name], policy, watch, breakdown, floor)
        except ValueError as error:
            fail(str(error), EXIT_BAD_INPUT)
        results.append(result.as_dict())
        if json_output:
            sys.stdout.write(json.dumps(results[-1]) + "\n")
    if json_output:
        return
    core = results[0]["core"] if results else "interpreted"
    title = f"simulator throughput (policy {policy}, core {core})"
    table = Table(title=title, title_justify="left")
    for column in (
        "workload",
        "jobs",
        "nodes",
        "GPUs",
        "events",
        "sim days",
        "load",
        "run (wall)",
        "run (CPU)",
        *(("floor (CPU)",) if floor else ()),
    ):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for row in results:
        table.add_row(
            row["workload"],
            f"{row['jobs']:,}",
            f"{row['nodes']:,}",
            f"{row['gpus']:,}",
            f"{row['events']:,}",
            f"{row['simulated_days']:.1f}",
            f"{row['load_s']:.2f} s",
            f"{row['run_s']:.2f} s",
            f"{row['run_cpu_s']:.2f} s",
            *((f"{row['floor_cpu_s']:.2f} s",) if floor else ()),
        )
    console = Console() if sys.stdout.isatty() else Console(width=120)
    console.print(table)
    for row in results:
        if "cycles" in row:
            console.print(_breakdown_table(row))


def _breakdown_table(row: dict[str, Any]) -> Table:
    """One workload's cycles by trigger, decision and change (caldera.bench.cycles)."""
    total = sum(entry["cpu_s"] for entry in row["cycles"]) or 1.0
    table = Table(
        title=f"{row['workload']}: {row['cycle_count']:,} cycles, by what woke them",
        title_justify="left",
    )
    for column in ("woken by", "decided", "state", "cycles", "CPU", "share", "mean"):
        table.add_column(column, justify="left" if column in ("woken by", "state") else "right")
    for entry in row["cycles"]:
        table.add_row(
            entry["trigger"],
            "yes" if entry["decided"] else "no",
            "unchanged" if entry["unchanged"] else "changed",
            f"{entry['cycles']:,}",
            f"{entry['cpu_s']:.2f} s",
            f"{100 * entry['cpu_s'] / total:.1f} %",
            f"{entry['mean_ms']:.2f} ms",
        )
    return table
