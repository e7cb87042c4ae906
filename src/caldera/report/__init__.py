"""Policy comparison: run one job list through several policies, tabulate, plot, report.

`write_report` (HTML and PNG figures) is imported on first use, so commands that only print
tables never load matplotlib.
"""

from __future__ import annotations

from typing import Any

from caldera.report.runs import DEFAULT_POLICIES, PolicyRun, order_policies, run_policies
from caldera.report.summary import (
    ROWS,
    TARGETS,
    Row,
    Target,
    comparison_document,
    meets_targets,
    summarize,
)

__all__ = [
    "DEFAULT_POLICIES",
    "ROWS",
    "TARGETS",
    "PolicyRun",
    "Row",
    "Target",
    "comparison_document",
    "meets_targets",
    "order_policies",
    "run_policies",
    "summarize",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from caldera.report.html import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
