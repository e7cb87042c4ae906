"""The seeds' comparison table, computed from one simulation result per policy.

The four rows the seeds report for their 512-GPU pool (BASELINES.md), with their "before" and
"after" figures, then the rows that explain them:

| row                         | from the §5 metrics                                   |
|-----------------------------|-------------------------------------------------------|
| critical SLA attainment     | `sla_attainment.critical`                             |
| GPU-hours wasted per day    | `wasted_gpu_hours_per_day`                            |
| gang-hang events per week   | `gang_hang_events` / observed weeks                   |
| GPU utilization             | `gpu_utilization`                                     |
| production SLA attainment   | `sla_attainment["large-job"]` (the seeds' production row) |
| large-job wait p95 / max    | `wait["large-job"].p95`, `large_job_max_wait`         |
| preemptions by type         | `preemptions.by_victim_type` / `by_preemptor_type`    |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from caldera.report.runs import PolicyRun

__all__ = [
    "ROWS",
    "TARGETS",
    "Row",
    "Target",
    "comparison_document",
    "format_row",
    "markdown_table",
    "meets_targets",
    "summarize",
]

_WEEK = 7 * 86_400


@dataclass(frozen=True, slots=True)
class Target:
    """One of the seeds' rows: the figure before (native preemption) and after (their system)."""

    key: str
    label: str
    op: str  # ">=" or "<="
    after: float
    before: float

    def met(self, value: float | None) -> bool | None:
        if value is None:
            return None
        return value >= self.after if self.op == ">=" else value <= self.after


TARGETS: tuple[Target, ...] = (
    Target("critical_sla_attainment", "critical SLA attainment", ">=", 0.9998, 0.912),
    Target("wasted_gpu_hours_per_day", "GPU-hours wasted per day", "<=", 0.4, 18.5),
    Target("gang_hang_events_per_week", "gang-hang events per week", "<=", 0.0, 23.0),
    Target("gpu_utilization", "GPU utilization", ">=", 0.896, 0.714),
)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f} %"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _hours(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _counts(value: dict[str, int] | None) -> str:
    if not value:
        return "0"
    return ", ".join(f"{kind} {count}" for kind, count in value.items())


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    label: str
    fmt: Callable[[Any], str]


ROWS: tuple[Row, ...] = (
    Row("critical_sla_attainment", "critical SLA attainment", _share),
    Row("wasted_gpu_hours_per_day", "GPU-hours wasted per day", _number),
    Row("gang_hang_events_per_week", "gang-hang events per week", _number),
    Row("gpu_utilization", "GPU utilization", _share),
    Row("large_job_sla_attainment", "production (large-job) SLA attainment", _share),
    Row("large_job_wait_p95", "large-job wait p95", _hours),
    Row("large_job_wait_max", "large-job wait max", _hours),
    Row("critical_wait_p99", "critical wait p99", _hours),
    Row("preemptions", "preemptions", lambda v: str(v)),
    Row("preemptions_by_victim", "  victims by type", _counts),
    Row("preemptions_by_preemptor", "  preemptors by type", _counts),
    Row("critical_preempted", "critical jobs preempted", lambda v: str(v)),
    Row("gang_hang_gpu_hours", "gang-hang GPU-hours", _number),
    Row("wasted_gpu_hours", "GPU-hours wasted (total)", _number),
)


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The comparison rows for one policy's §6 result document."""
    metrics = result["metrics"]
    observed = metrics.get("observed_seconds") or 0.0
    weeks = observed / _WEEK if observed else 0.0
    large_wait = metrics["wait"].get("large-job", {})
    critical_wait = metrics["wait"].get("critical", {})
    preemptions = metrics["preemptions"]
    return {
        "critical_sla_attainment": metrics["sla_attainment"].get("critical"),
        "wasted_gpu_hours_per_day": metrics["wasted_gpu_hours_per_day"],
        "gang_hang_events_per_week": round(metrics["gang_hang_events"] / weeks, 3)
        if weeks
        else 0.0,
        "gpu_utilization": metrics["gpu_utilization"],
        "large_job_sla_attainment": metrics["sla_attainment"].get("large-job"),
        "large_job_wait_p95": large_wait.get("p95"),
        "large_job_wait_max": metrics.get("large_job_max_wait"),
        "critical_wait_p99": critical_wait.get("p99"),
        "preemptions": preemptions["total"],
        "preemptions_by_victim": preemptions["by_victim_type"],
        "preemptions_by_preemptor": preemptions["by_preemptor_type"],
        "critical_preempted": metrics["critical_preempted"],
        "gang_hang_gpu_hours": metrics["gang_hang_gpu_hours"],
        "wasted_gpu_hours": metrics["wasted_gpu_hours"],
    }


def meets_targets(summary: dict[str, Any]) -> dict[str, bool | None]:
    """Per seeds' row: does this policy meet or beat the seeds' "after" figure?"""
    return {target.key: target.met(summary.get(target.key)) for target in TARGETS}


def format_row(row: Row, summary: dict[str, Any]) -> str:
    return row.fmt(summary.get(row.key))


def comparison_document(
    scenario: str, runs: Sequence[PolicyRun], command: str | None = None
) -> dict[str, object]:
    """What `caldera compare --json` prints and the report stores as comparison.json."""
    first = runs[0].result["metrics"] if runs else {}
    return {
        "scenario": scenario,
        "command": command,
        "gpus": first.get("gpus"),
        "jobs": len(runs[0].result["jobs"]) if runs else 0,
        "observed_days": round((first.get("observed_seconds") or 0.0) / 86_400, 3),
        "policies": [run.policy for run in runs],
        "targets": {
            t.key: {"label": t.label, "op": t.op, "after": t.after, "before": t.before}
            for t in TARGETS
        },
        "results": {
            run.policy: {
                "summary": (summary := summarize(run.result)),
                "meets_targets": {t.key: t.met(summary.get(t.key)) for t in TARGETS},
                "metrics": run.result["metrics"],
                "wall_seconds": round(run.wall_seconds, 3),
            }
            for run in runs
        },
    }


def markdown_table(runs: Sequence[PolicyRun]) -> str:
    """The comparison as a Markdown table (policies as columns, the seeds' columns last)."""
    targets = {t.key: t for t in TARGETS}
    summaries = [summarize(run.result) for run in runs]
    head = ["metric", *(run.policy for run in runs), "seeds' before", "target (after)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in ROWS:
        target = targets.get(row.key)
        cells = [format_row(row, summary) for summary in summaries]
        before = row.fmt(target.before) if target else ""
        after = f"{target.op} {row.fmt(target.after)}" if target else ""
        label = row.label.strip()
        lines.append("| " + " | ".join([label, *cells, before, after]) + " |")
    return "\n".join(lines) + "\n"
