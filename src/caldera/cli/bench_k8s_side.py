"""`caldera bench k8s --modes …`: the side-by-side run's input checks and its table
(the run itself: caldera.bench.kube.side)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from caldera.cli.errors import EXIT_BAD_INPUT, fail

__all__ = ["run_side_by_side"]

# The processes whose CPU seconds the table shows, as (column, dev-cluster process names).
_CPU_COLUMNS = (
    ("apiserver", ("kube-apiserver",)),
    ("etcd", ("etcd",)),
    ("sched+ctrl", ("kube-scheduler", "kube-controller-manager", "vc-scheduler",
                    "vc-controller-manager", "caldera-controller")),
)  # fmt: skip


def run_side_by_side(
    modes_text: str,
    nodes: int,
    gpus_per_node: int,
    pods: int,
    gpus_per_pod: int,
    gang_share: float,
    seed: int,
    submitters: int,
    timeout: float,
    json_output: bool,
    gangs: int = 0,
    logs: Path | None = None,
    volcano_args: str = "",
) -> None:
    """Check the input (one line on bad input, before any cluster starts), run, print."""
    from caldera.bench.kube.side import bench_side_by_side
    from caldera.bench.kube.workload import SideMode, gang_sizes
    from caldera.devcluster import DevClusterError, find_bins
    from caldera.devcluster.volcano import find_volcano

    known = {m.value: m for m in SideMode}
    asked = [m.strip() for m in modes_text.split(",") if m.strip()]
    unknown = [m for m in asked if m not in known]
    if not asked or unknown or len(set(asked)) != len(asked):
        fail(
            f"--modes: a comma list of distinct modes out of {', '.join(known)} "
            f"(got {modes_text!r})",
            EXIT_BAD_INPUT,
        )
    if not 0 <= gang_share <= 1:
        fail("--gang-share must be between 0 and 1", EXIT_BAD_INPUT)
    room = nodes * (gpus_per_node // gpus_per_pod)
    if gangs < 0:
        fail("--gangs must be 0 or more", EXIT_BAD_INPUT)
    if gangs and sum(gang_sizes(gangs, seed)) > room:
        fail(
            f"the preemption case needs room for every gang at once: {gangs} gangs of "
            f"{sum(gang_sizes(gangs, seed))} pods in all need more than the {room} places of "
            f"{nodes} nodes",
            EXIT_BAD_INPUT,
        )
    if not gangs and pods > room:
        fail(
            f"side by side, every pod fits at once: {pods} pods of {gpus_per_pod} GPU(s) "
            f"need more than the {room} places of {nodes} nodes",
            EXIT_BAD_INPUT,
        )
    try:
        volcano_flags = shlex.split(volcano_args)
    except ValueError as error:
        fail(f"--volcano-controller-args: {error}", EXIT_BAD_INPUT)
    if any(not flag.startswith("--") for flag in volcano_flags):
        fail(
            "--volcano-controller-args: flags of vc-controller-manager, each --NAME=VALUE "
            f"(got {volcano_args!r})",
            EXIT_BAD_INPUT,
        )
    modes = [known[m] for m in asked]
    try:
        find_bins()
        volcano = find_volcano() if any(m.needs_volcano for m in modes) else None
    except DevClusterError as error:
        fail(str(error))
    if volcano is None and any(m.needs_volcano for m in modes):
        fail(
            "modes volcano, volcano-job and caldera-volcano need the real Volcano "
            "(make cluster-bins)"
        )

    def say(line: str) -> None:
        sys.stderr.write(f"bench k8s: {line}\n")
        sys.stderr.flush()

    report = bench_side_by_side(
        modes, nodes, gpus_per_node, pods, gpus_per_pod, gang_share, seed, volcano,
        submitters, timeout, say, gangs, logs, volcano_flags,
    )  # fmt: skip
    if json_output:
        sys.stdout.write(json.dumps(report) + "\n")
    else:
        _print(report)
    if any(r["error"] for r in report["modes"]):
        fail("; ".join(f"{r['mode']}: {r['error']}" for r in report["modes"] if r["error"]))


def _print(report: dict[str, object]) -> None:
    rows = report["modes"]
    assert isinstance(rows, list)
    first = rows[0]
    table = Table(
        title=f"{first['pods']} pods ({first['jobs']} jobs, {first['gangs']} gangs of 8-64) on "
        f"{first['nodes']} nodes x {first['gpus_per_node']} GPUs"
        + (f", after {first['fill']} low-priority fillers" if first["fill"] else "")
    )
    for column in ("mode", "bound", "pods/s", "sub->bind p50", "p99", "req/pod", "wr/pod"):
        table.add_column(column, justify="right")
    for column, _ in _CPU_COLUMNS:
        table.add_column(f"CPU s {column}", justify="right")
    table.add_column("RSS MiB apiserver", justify="right")
    table.add_column("RSS MiB sched+ctrl", justify="right")
    table.add_column("load", justify="right")
    preempt = bool(first["fill"])
    if preempt:
        table.add_column("evictions/s", justify="right")
    for column in ("ctrl wr/job", "admit p50/p99", "decision->bind p99"):
        table.add_column(column, justify="right")  # caldera modes only
    for r in rows:
        cpu = r["cpu_s"]
        caldera = r["mode"].startswith("caldera")
        table.add_row(
            r["mode"],
            f"{r['bound']}/{r['pods']}",
            f"{r['pods_per_s']:.1f}",
            f"{r['bind_p50_s']:.2f} s",
            f"{r['bind_p99_s']:.2f} s",
            f"{r['requests_per_pod']:.2f}",
            f"{r['writes_per_pod']:.2f}",
            *(f"{sum(cpu.get(n, 0.0) for n in procs):.1f}" for _, procs in _CPU_COLUMNS),
            f"{r['rss_mib'].get('kube-apiserver', 0.0):.0f}",
            f"{sum(r['rss_mib'].get(n, 0.0) for n in _CPU_COLUMNS[2][1]):.0f}",
            "{:.1f}-{:.1f}".format(*r["load"]),
            *([f"{r['evictions_per_s']:.1f} ({r['evictions']})"] if preempt else []),
            f"{r['controller_writes_per_job']:.2f}" if r["controller_writes"] else "-",
            f"{r['admit_p50_s']:.2f}/{r['admit_p99_s']:.2f} s" if caldera else "-",
            f"{r['decision_bind_p99_s']:.2f} s" if caldera else "-",
        )
    console = Console(width=230)
    console.print(table)
    for r in rows:
        if r["mode"].startswith("caldera"):
            console.print(
                "admission, {}: sent -> TrainingJob seen {:.2f}/{:.2f} s, seen -> status "
                "{:.2f}/{:.2f} s (p50/p99)".format(
                    r["mode"], *r["admit_create_s"], *r["admit_controller_s"]
                )
            )
            spread = ", ".join(f"{n}: {k}" for n, k in r["single_pod_writes_spread"].items())
            console.print(
                f"writes per single-pod job, {r['mode']}: {r['single_pod_writes']:.2f} "
                f"(jobs by writes: {spread})"
            )
    flags = report.get("volcano_controller_flags")
    if isinstance(flags, list) and flags:
        console.print(f"vc-controller-manager ran with {' '.join(flags)}")
    ratios = report["ratios"]
    assert isinstance(ratios, dict)
    for name, value in ratios.items():
        console.print(f"pods bound per second, {name}: {value:.2f}x")
