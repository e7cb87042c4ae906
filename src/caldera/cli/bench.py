"""`caldera bench …`: performance benchmarks (figures recorded in docs/benchmarks.md)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from caldera.bench.cycle import CASES, bench_cycle
from caldera.cli.errors import EXIT_BAD_INPUT, fail

__all__ = ["bench_app"]

bench_app = typer.Typer(
    help="Benchmarks: cycle latency, simulator throughput.", no_args_is_help=True
)


@bench_app.command("cycle")
def cycle_command(
    nodes: Annotated[int, typer.Option(help="Nodes in the synthetic cluster.")] = 1024,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    pending: Annotated[int, typer.Option(help="Pending jobs in the snapshot.")] = 10000,
    running: Annotated[int, typer.Option(help="Running jobs in the snapshot.")] = 4000,
    cycles: Annotated[int, typer.Option(help="Timed cycles.")] = 20,
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 1,
    case: Annotated[
        str,
        typer.Option(
            help="busy: fragmented room, mixed backlog; saturated: a full cluster of "
            "equal-priority work where every search must fail."
        ),
    ] = "busy",
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Time full scheduling cycles on a synthetic snapshot; print p50/p95/p99 in ms."""
    if case not in CASES:
        fail(f"unknown case {case!r} (known: {', '.join(CASES)})", EXIT_BAD_INPUT)
    if min(nodes, gpus_per_node, cycles) < 1 or min(pending, running) < 0:
        fail(
            "nodes, gpus-per-node and cycles must be positive; pending/running >= 0", EXIT_BAD_INPUT
        )
    result = bench_cycle(nodes, gpus_per_node, pending, running, cycles, seed, case=case).as_dict()
    if json_output:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    Console().print(
        f"{case} cycle on {result['nodes']} nodes / {result['gpus']} GPUs, "
        f"{result['pending']} pending, "
        f"{result['running']} running: p50 {result['p50_ms']:.1f} ms, "
        f"p95 {result['p95_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms "
        f"over {result['cycles']} cycles ({result['starts_per_cycle']} starts, "
        f"{result['evictions_per_cycle']} evictions per cycle); building the snapshot's "
        f"indexes from scratch: {result['snapshot_build_ms']:.1f} ms; the first cycle, "
        f"with no memo of failed searches: {result['cold_ms']:.1f} ms; searches the memo "
        f"saved: {result['memo_hits']}"
    )
