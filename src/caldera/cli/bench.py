"""`caldera bench …`: performance benchmarks (figures recorded in docs/benchmarks.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
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
        f"saved: {result['memo_hits']}; core {result['core']}"
    )


@bench_app.command("k8s")
def k8s_command(
    nodes: Annotated[int, typer.Option(help="KWOK GPU nodes in the dev cluster.")] = 1000,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    jobs: Annotated[int, typer.Option(help="Single-pod TrainingJobs applied at once.")] = 7992,
    gpus_per_job: Annotated[int, typer.Option(help="GPUs each job's pod asks for.")] = 1,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every pod to bind.")] = 900,
    steady: Annotated[
        float, typer.Option(help="Seconds of steady state measured after every pod is bound.")
    ] = 30,
    submitters: Annotated[int, typer.Option(help="Clients creating the TrainingJobs at once.")] = 8,
    run_for: Annotated[
        float,
        typer.Option(
            help="Seconds the first jobs run before they end, when more jobs than fit at once "
            "are asked for (they make room for the rest)."
        ),
    ] = 60.0,
    logs: Annotated[
        Path | None,
        typer.Option(help="Keep the control plane's and the controller's logs in this folder."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    modes: Annotated[
        str | None,
        typer.Option(
            help="Side by side: a comma list out of kube-scheduler, volcano (PodGroups and "
            "pods), volcano-job (Volcano Jobs), caldera, caldera-volcano, each on its own fresh "
            "dev cluster; --jobs is then the pods in "
            "all, every one fitting at once. Without it: caldera alone, as before."
        ),
    ] = None,
    gang_share: Annotated[
        float, typer.Option(help="Side by side: the share of the pods in gangs of 8-64 tasks.")
    ] = 0.2,
    seed: Annotated[int, typer.Option(help="Side by side: the workload's seed.")] = 1,
    gangs: Annotated[
        int,
        typer.Option(
            help="Side by side, the preemption case: the cluster filled with low-priority "
            "single-pod jobs first, then this many gangs of 8-64 tasks at high priority "
            "(--jobs and --gang-share are then not used)."
        ),
    ] = 0,
    volcano_controller_args: Annotated[
        str,
        typer.Option(
            help="Side by side: more flags for vc-controller-manager wherever it runs, e.g. "
            "'--kube-api-qps=1000 --kube-api-burst=2000 --worker-threads=8' (its defaults: "
            "50 requests/s, 3 job workers)."
        ),
    ] = "",
) -> None:
    """The controller on a real control plane (dev cluster): decision-to-bind latency,
    CPU and memory, recovery after a crash; with --modes, the same workload through each
    runtime side by side. Needs `make cluster-bins`."""
    from caldera.bench.kube.scale import bench_k8s
    from caldera.devcluster import DevClusterError

    if min(nodes, gpus_per_node, jobs, gpus_per_job, submitters) < 1 or steady < 0:
        fail(
            "nodes, gpus-per-node, jobs, gpus-per-job and submitters must be positive, steady >= 0",
            EXIT_BAD_INPUT,
        )
    if gpus_per_job > gpus_per_node or run_for <= 0:
        fail("a job's GPUs must fit in one node, and run-for must be positive", EXIT_BAD_INPUT)
    if modes is not None:
        from caldera.cli.bench_k8s_side import run_side_by_side

        run_side_by_side(
            modes, nodes, gpus_per_node, jobs, gpus_per_job, gang_share, seed, submitters,
            timeout, json_output, gangs, logs, volcano_controller_args,
        )  # fmt: skip
        return
    try:
        result = bench_k8s(
            nodes, gpus_per_node, jobs, gpus_per_job, timeout, steady, submitters, logs, run_for
        ).as_dict()
    except (DevClusterError, TimeoutError) as error:
        fail(str(error))
    if json_output:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    Console().print(
        f"{result['jobs']} pods on {result['nodes']} nodes x {result['gpus_per_node']} GPUs: "
        f"all bound {result['all_bound_s']:.1f} s after submission; decision -> bind p50 "
        f"{result['bind_p50_s']:.2f} s, p99 {result['bind_p99_s']:.2f} s, max "
        f"{result['bind_max_s']:.2f} s; controller {result['controller_cpu_s']:.1f} CPU-s, "
        f"peak RSS {result['controller_rss_mib']:.0f} MiB; recovery after SIGKILL "
        f"{result['recovery_s']:.1f} s (cluster start {result['cluster_start_s']:.0f} s); "
        f"API requests per cycle {result['requests_per_cycle']:.1f} ({result['cycles']} "
        f"cycles); steady {result['steady_s']:.0f} s: {result['steady_requests_per_cycle']:.1f} "
        f"per cycle over {result['steady_cycles']} cycles, {result['steady_lists']} re-lists "
        f"(server LISTs, all clients: {result['steady_server_lists'] or 'none'})"
    )
