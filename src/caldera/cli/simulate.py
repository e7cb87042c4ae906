"""`caldera simulate FILE [--json]`: run a scenario through the simulator."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from caldera.cli.errors import EXIT_BAD_INPUT, fail
from caldera.cli.progress import sim_progress
from caldera.policies import policy_names
from caldera.sim import ScenarioError, Simulator, load_scenario

__all__ = ["register", "summary_table"]


def _fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def _fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}%"


def summary_table(result: dict[str, Any], title: str) -> Table:
    metrics = result["metrics"]
    table = Table(title=title, title_justify="left")
    table.add_column("job type")
    for column in ("jobs started", "wait p50", "wait p95", "wait max", "SLA"):
        table.add_column(column, justify="right")
    for kind, wait in metrics["wait"].items():
        table.add_row(
            kind,
            str(wait["count"]),
            _fmt_seconds(wait["p50"]),
            _fmt_seconds(wait["p95"]),
            _fmt_seconds(wait["max"]),
            _fmt_share(metrics["sla_attainment"].get(kind)),
        )
    return table


def _print_summary(result: dict[str, Any], name: str) -> None:
    console = Console()
    metrics = result["metrics"]
    console.print(summary_table(result, f"{name} — policy {result['policy']}"))
    states: dict[str, int] = {}
    for job in result["jobs"]:
        states[job["state"]] = states.get(job["state"], 0) + 1
    preemptions = metrics["preemptions"]
    rows = [
        ("jobs", ", ".join(f"{k} {v}" for k, v in sorted(states.items()))),
        ("GPU utilization", _fmt_share(metrics["gpu_utilization"])),
        (
            "GPU-hours wasted",
            f"{metrics['wasted_gpu_hours']:.2f} ({metrics['wasted_gpu_hours_per_day']:.2f}/day)",
        ),
        ("preemptions", f"{preemptions['total']} {preemptions['by_victim_type'] or ''}"),
        ("critical preempted", str(metrics["critical_preempted"])),
        ("gang hang GPU-hours", f"{metrics['gang_hang_gpu_hours']:.2f}"),
        ("large-job max wait", _fmt_seconds(metrics["large_job_max_wait"])),
        (
            "throttle",
            f"{metrics['throttle_episodes']} episodes, "
            f"{metrics['throttle_held_seconds']:.0f}s held",
        ),
    ]
    for label, value in rows:
        console.print(f"[bold]{label}:[/bold] {value}")


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        file: Annotated[Path, typer.Argument(help="Scenario file (YAML or JSON, DESIGN §6).")],
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the result document as JSON on stdout.")
        ] = False,
        policy: Annotated[
            str | None, typer.Option(help="Run under this policy instead of the file's.")
        ] = None,
        output: Annotated[
            Path | None, typer.Option("--output", "-o", help="Also write the JSON here.")
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    ) -> None:
        """Run a scenario through the event-driven simulator."""
        try:
            scenario = load_scenario(file)
        except ScenarioError as error:
            fail(str(error), EXIT_BAD_INPUT)
        if policy is not None:
            if policy not in policy_names():
                fail(
                    f"unknown policy {policy!r} (known: {', '.join(policy_names())})",
                    EXIT_BAD_INPUT,
                )
            scenario = scenario.with_policy(policy)
        with sim_progress(scenario, quiet) as tick:
            result = Simulator(scenario, progress=tick).run().result()
        text = json.dumps(result, separators=(",", ":"))
        if output is not None:
            try:
                output.write_text(text + "\n", encoding="utf-8")
            except OSError as error:
                fail(f"cannot write {output}: {error.strerror}")
        if json_output:
            sys.stdout.write(text + "\n")
        else:
            _print_summary(result, scenario.name)
