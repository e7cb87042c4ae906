"""`--report DIR`: one self-contained HTML page beside its PNG figures."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from string import Template

from caldera.report.plots import write_plots
from caldera.report.runs import PolicyRun
from caldera.report.summary import (
    ROWS,
    TARGETS,
    comparison_document,
    format_row,
    markdown_table,
    summarize,
)

__all__ = ["write_report"]


def _table(runs: Sequence[PolicyRun]) -> str:
    targets = {t.key: t for t in TARGETS}
    summaries = [summarize(run.result) for run in runs]
    head = "".join(f"<th>{html.escape(run.policy)}</th>" for run in runs)
    lines = [
        "<table>",
        f"<thead><tr><th>metric</th>{head}<th>seeds' before</th><th>target (after)</th></tr>"
        "</thead><tbody>",
    ]
    for row in ROWS:
        target = targets.get(row.key)
        cells = []
        for summary in summaries:
            met = target.met(summary.get(row.key)) if target else None
            css = "" if met is None else (' class="met"' if met else ' class="missed"')
            cells.append(f"<td{css}>{html.escape(format_row(row, summary))}</td>")
        before = row.fmt(target.before) if target else ""
        after = f"{target.op} {row.fmt(target.after)}" if target else ""
        lines.append(
            f"<tr><td>{html.escape(row.label.strip())}</td>{''.join(cells)}"
            f"<td>{html.escape(before)}</td><td>{html.escape(after)}</td></tr>"
        )
    lines.append("</tbody></table>")
    return "\n".join(lines)


def _runs(runs: Sequence[PolicyRun], command: str | None) -> str:
    items = "".join(
        f"<li>{html.escape(run.policy)}: {run.wall_seconds:.1f} s wall clock, "
        f"{len(run.result['events'])} events</li>"
        for run in runs
    )
    made = f"<p>Made with <code>{html.escape(command)}</code>.</p>" if command else ""
    return f"{made}<ul>{items}</ul>"


def write_report(
    folder: Path, scenario: str, runs: Sequence[PolicyRun], command: str | None = None
) -> Path:
    """Write index.html, the PNG figures, comparison.json and table.md (the Markdown table)
    into `folder`; return the page."""
    if not runs:
        raise ValueError("no runs to report")
    folder.mkdir(parents=True, exist_ok=True)
    write_plots(runs, folder)
    document = comparison_document(scenario, runs, command)
    (folder / "comparison.json").write_text(json.dumps(document, indent=2) + "\n", "utf-8")
    (folder / "table.md").write_text(markdown_table(runs), "utf-8")
    metrics = runs[0].result["metrics"]
    facts = (
        f"{document['jobs']} jobs on {metrics['gpus']} GPUs, "
        f"{document['observed_days']} simulated days, policies: "
        f"{', '.join(run.policy for run in runs)}."
    )
    template = Template(
        resources.files("caldera.report").joinpath("template.html").read_text("utf-8")
    )
    page = template.substitute(
        title=html.escape(scenario),
        facts=html.escape(facts),
        table=_table(runs),
        runs=_runs(runs, command),
    )
    index = folder / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
