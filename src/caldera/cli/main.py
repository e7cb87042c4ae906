"""Entry point of the `caldera` command. Each command group lives in its own module."""

from __future__ import annotations

from importlib.metadata import version

import typer

import caldera.cli.bench_sim  # noqa: F401  (registers `caldera bench sim`)
from caldera.cli import bench_api, service_cmds, simulate  # noqa: F401 - bench_api adds `bench api`
from caldera.cli import compare as compare_command
from caldera.cli import demo as demo_command
from caldera.cli.bench import bench_app
from caldera.cli.k8s import k8s_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="caldera",
    help="caldera: a GPU-cluster scheduler — simulate, compare, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
simulate.register(app)
compare_command.register(app)
demo_command.register(app)
service_cmds.register(app)
app.add_typer(bench_app, name="bench")
app.add_typer(k8s_app, name="k8s")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"caldera {version('caldera')}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """caldera: a GPU-cluster scheduler — simulate, compare, serve."""


def main() -> None:
    app()
