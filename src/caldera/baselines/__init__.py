"""Baseline policies registered beside caldera (BASELINES.md): `fifo`, `priority-kill`,
`volcano`. `caldera.policies` registers them by name beside caldera's own."""

from caldera.baselines.fifo import FIFO
from caldera.baselines.priority_kill import PRIORITY_KILL
from caldera.baselines.volcano import VOLCANO

__all__ = ["BASELINES", "FIFO", "PRIORITY_KILL", "VOLCANO"]

BASELINES = (FIFO, PRIORITY_KILL, VOLCANO)
