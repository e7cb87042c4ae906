"""`caldera bench api`: submission load against the service (see caldera.bench.api)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from caldera.cli.bench import bench_app
from caldera.cli.errors import EXIT_BAD_INPUT, fail

__all__ = ["api_command"]


@bench_app.command("api")
def api_command(
    rate: Annotated[float, typer.Option(help="Submissions per second (open loop).")] = 200.0,
    duration: Annotated[float, typer.Option(help="Seconds of load.")] = 60.0,
    gpus: Annotated[int, typer.Option(help="Virtual GPUs of the server it starts.")] = 8,
    workers: Annotated[int, typer.Option(help="Client threads.")] = 16,
    starts: Annotated[int, typer.Option(help="Idle-GPU start latency probes.")] = 20,
    url: Annotated[
        str | None, typer.Option(help="Use this server (CALDERA_TOKEN) instead of starting one.")
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database of the server it starts [default: SQLite].")
    ] = None,
    private_postgres: Annotated[
        bool,
        typer.Option(
            help="Start a private PostgreSQL (fsync on, Debian's binaries) for the server."
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Submit at a fixed rate through the REST API; report submit latency and start time."""
    from caldera.bench.api import bench_api

    if rate <= 0 or duration <= 0 or gpus < 1 or workers < 1 or starts < 1:
        fail("rate, duration, gpus, workers and starts must be positive", EXIT_BAD_INPUT)
    if private_postgres and (url or database_url):
        fail(
            "--private-postgres starts its own database: no --url or --database-url", EXIT_BAD_INPUT
        )
    console = Console(stderr=True)
    try:
        result = bench_api(
            url=url,
            rate=rate,
            duration=duration,
            gpus=gpus,
            workers=workers,
            starts=starts,
            database_url=database_url,
            private_postgres=private_postgres,
        ).as_dict()
    except Exception as error:  # one line for the user whatever broke
        fail(f"benchmark failed: {error}")
    if json_output:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    console.print(
        f"{result['submitted']} submissions in {result['duration']:g}s "
        f"({result['achieved_rate']}/s offered {result['rate']:g}/s, {result['errors']} errors "
        f"{result['error_kinds'] or ''}): "
        f"submit p50 {result['submit_p50_ms']} ms, p99 {result['submit_p99_ms']} ms, "
        f"max {result['submit_max_ms']} ms (inside the server p50 {result['server_p50_ms']} "
        f"ms, p99 {result['server_p99_ms']} ms); idle-GPU start p50 {result['start_p50_ms']} ms, "
        f"max {result['start_max_ms']} ms; {result['pending_at_end']} pending at the end; "
        f"mean cycle {result['cycle_mean_ms']} ms"
    )
