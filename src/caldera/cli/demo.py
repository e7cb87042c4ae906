"""`caldera demo` (what `make demo` runs): the seeds' comparison, small enough for a laptop.

Runs the bundled `examples/demo.yaml` — the seeds' 512-GPU production pool over a shorter
window — through caldera and every registered baseline, prints the seeds' table and writes
the HTML report (default ./reports/demo/). The full 14-day scenario is
`examples/production-14d.yaml`, for `caldera compare`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from caldera.cli.compare import parse_policies, run_comparison, write_outputs
from caldera.cli.errors import EXIT_BAD_INPUT, fail
from caldera.sim import ScenarioError, load_scenario

__all__ = ["DEMO_SCENARIO", "register"]

DEMO_SCENARIO = "demo.yaml"


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        report: Annotated[
            Path, typer.Option(help="Folder for the HTML report and its figures.")
        ] = Path("reports/demo"),
        policies: Annotated[
            str | None,
            typer.Option(help="Comma-separated policies (default: every registered one)."),
        ] = None,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the comparison as JSON instead.")
        ] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    ) -> None:
        """Compare caldera with the baselines on the seeds' production pool; write a report."""
        chosen = parse_policies(policies)
        example = resources.files("caldera").joinpath("examples", DEMO_SCENARIO)
        try:
            with resources.as_file(example) as path:
                scenario = load_scenario(path)
        except ScenarioError as error:
            fail(str(error), EXIT_BAD_INPUT)
        runs = run_comparison(scenario, chosen, quiet)
        write_outputs(scenario, runs, json_output, report, quiet)
