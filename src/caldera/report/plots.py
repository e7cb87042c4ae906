"""The report's figures, drawn with matplotlib's Agg backend (no display needed).

- `utilization.png`: allocated GPUs / pool, hourly time-weighted means, one line per policy;
- `wait_cdf.png`: one panel per job type, the share of jobs started within a wait (log
  scale); jobs that never started keep the curve below 1;
- `lost_gpu_hours.png`: GPU-hours lost to preemption, cumulative over time per policy, and the
  total split by the victims' job type.

A scenario's warm-up (`workload.warmup`) is shaded on the utilization plot and left out of the
others, as it is left out of the metrics.

Figures are built with matplotlib's object API (`Figure`, rendered by Agg on save), never
pyplot: no global state, no display, nothing to close.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from caldera.model import JobType
from caldera.report.runs import PolicyRun

__all__ = [
    "hourly_utilization",
    "plot_lost_work",
    "plot_utilization",
    "plot_wait_cdf",
    "write_plots",
]

_HOUR = 3600.0
_DAY = 86_400.0
_DPI = 110


def hourly_utilization(
    series: Sequence[tuple[float, float]], gpus: float, bin_seconds: float = _HOUR
) -> tuple[np.ndarray, np.ndarray]:
    """Bin starts (seconds) and the time-weighted mean share of GPUs allocated in each bin.

    `series` holds (t, allocated) at every change; the value holds until the next point.
    """
    if len(series) < 2 or gpus <= 0:
        return np.empty(0), np.empty(0)
    times = np.asarray([t for t, _ in series], dtype=float)
    values = np.asarray([v for _, v in series], dtype=float)
    begin, end = times[0], times[-1]
    edges = np.arange(begin, end + bin_seconds, bin_seconds)
    if edges[-1] < end:
        edges = np.append(edges, end)
    # GPU-seconds allocated from `begin` up to each change point, then at each bin edge.
    area = np.concatenate(([0.0], np.cumsum(values[:-1] * np.diff(times))))
    at_edges = np.interp(edges, times, area)
    widths = np.diff(edges)
    means = np.divide(np.diff(at_edges), widths, out=np.zeros_like(widths), where=widths > 0)
    return edges[:-1], means / gpus


def plot_utilization(runs: Sequence[PolicyRun], path: Path) -> Path:
    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    for run in runs:
        starts, shares = hourly_utilization(run.series, run.gpus)
        if starts.size:
            mean = run.result["metrics"]["gpu_utilization"] * 100
            ax.plot(starts / _DAY, shares * 100, lw=1.0, label=f"{run.policy} (mean {mean:.1f} %)")
    warmup = max((run.warmup for run in runs), default=0.0)
    if warmup > 0:
        ax.axvspan(0, warmup / _DAY, color="grey", alpha=0.15, label="warm-up (not measured)")
    ax.set_xlabel("simulated day")
    ax.set_ylabel("GPUs allocated, % (hourly mean)")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("GPU utilization over time")
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    return path


def _waits(result: dict[str, Any], kind: str, warmup: float) -> tuple[np.ndarray, int]:
    """Sorted waits (s) of the jobs of `kind` that started, and how many were accepted."""
    waits = []
    accepted = 0
    for job in result["jobs"]:
        if job["type"] != kind or job["state"] in ("Rejected", "Cancelled"):
            continue
        if job["submit"] < warmup:
            continue
        accepted += 1
        if job["start"] is not None:
            waits.append(job["start"] - job["submit"])
    return np.sort(np.asarray(waits, dtype=float)), accepted


def plot_wait_cdf(runs: Sequence[PolicyRun], path: Path) -> Path:
    kinds = [kind.value for kind in JobType]
    fig = Figure(figsize=(10, 7))
    axes = fig.subplots(2, 2, sharey=True)
    for ax, kind in zip(axes.flat, kinds, strict=True):
        drawn = False
        for run in runs:
            waits, accepted = _waits(run.result, kind, run.warmup)
            if not accepted:
                continue
            # A wait of 0 cannot sit on a log axis: show it at one second.
            x = np.concatenate(([1.0], np.maximum(waits, 1.0)))
            y = np.concatenate(([0.0], np.arange(1, waits.size + 1) / accepted))
            ax.step(x, y * 100, where="post", lw=1.2, label=run.policy)
            drawn = True
        ax.set_xscale("log")
        ax.set_title(kind)
        ax.set_xlabel("wait (s, log scale)")
        ax.set_ylabel("jobs started, %")
        ax.set_ylim(0, 101)
        ax.grid(alpha=0.3, which="both")
        if drawn:
            ax.legend(fontsize=8, loc="lower right")
        else:
            ax.text(0.5, 0.5, "no jobs of this type", ha="center", transform=ax.transAxes)
    fig.suptitle("Wait-time CDF per job type")
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    return path


def _lost_events(
    result: dict[str, Any], warmup: float
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    types = {job["name"]: job["type"] for job in result["jobs"]}
    times, lost = [], []
    by_type: dict[str, float] = {}
    for event in result["events"]:
        if event["kind"] != "evict" or event["t"] < warmup:
            continue
        hours = event.get("lost_gpu_seconds", 0.0) / _HOUR
        times.append(event["t"])
        lost.append(hours)
        kind = types.get(event["job"], "?")
        by_type[kind] = by_type.get(kind, 0.0) + hours
    return np.asarray(times, dtype=float), np.asarray(lost, dtype=float), by_type


def plot_lost_work(runs: Sequence[PolicyRun], path: Path) -> Path:
    fig = Figure(figsize=(11, 4))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    totals: dict[str, dict[str, float]] = {}
    for run in runs:
        times, lost, by_type = _lost_events(run.result, run.warmup)
        totals[run.policy] = by_type
        end = run.series[-1][0] if run.series else 0.0
        x = np.concatenate(([run.warmup], times, [end])) / _DAY
        y = np.concatenate(([0.0], np.cumsum(lost), [lost.sum()]))
        left.step(x, y, where="post", lw=1.2, label=run.policy)
    left.set_xlabel("simulated day")
    left.set_ylabel("GPU-hours lost (cumulative)")
    left.set_title("Work lost to preemption")
    left.grid(alpha=0.3)
    left.legend(fontsize=8, loc="upper left")
    names = [run.policy for run in runs]
    bottom = np.zeros(len(names))
    for kind in [k.value for k in JobType]:
        heights = np.asarray([totals[name].get(kind, 0.0) for name in names])
        if heights.any():
            right.bar(names, heights, bottom=bottom, label=f"victim {kind}")
            bottom += heights
    right.set_ylabel("GPU-hours lost (total)")
    right.set_title("by victim type")
    right.grid(alpha=0.3, axis="y")
    if bottom.any():
        right.legend(fontsize=8)
    else:
        right.text(0.5, 0.5, "no work lost", ha="center", transform=right.transAxes)
    right.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    return path


def write_plots(runs: Sequence[PolicyRun], folder: Path) -> dict[str, Path]:
    """Draw every figure into `folder`; returns them by name."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "utilization": plot_utilization(runs, folder / "utilization.png"),
        "wait_cdf": plot_wait_cdf(runs, folder / "wait_cdf.png"),
        "lost_gpu_hours": plot_lost_work(runs, folder / "lost_gpu_hours.png"),
    }
