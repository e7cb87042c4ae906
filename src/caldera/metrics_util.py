"""Small numeric helpers shared by reports and benchmarks."""

from __future__ import annotations

import math

__all__ = ["percentile"]


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (numpy's default method)."""
    if not sorted_values:
        return 0.0
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return sorted_values[low]
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)
