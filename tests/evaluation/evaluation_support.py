"""Helpers for the evaluation tests: trace excerpts cut at test time, small scenarios."""

from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["excerpt"]


def excerpt(source: Path, target: Path, rows: int, keep: set[str] | None = None) -> Path:
    """Copy the header and the first `rows` data rows (or the rows named in `keep`)."""
    with source.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        chosen = []
        for row in reader:
            if keep is not None:
                if row[0] in keep:
                    chosen.append(row)
            elif len(chosen) < rows:
                chosen.append(row)
            else:
                break
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(chosen)
    return target
