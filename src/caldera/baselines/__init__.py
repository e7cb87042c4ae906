"""Baseline policies registered beside caldera (BASELINES.md): `fifo`, `priority-kill`,
`volcano`, and `volcano-seed001` (Volcano as seed 001 configures it, issue 14).
`caldera.policies` registers them by name beside caldera's own."""

from caldera.baselines.fifo import FIFO
from caldera.baselines.priority_kill import PRIORITY_KILL
from caldera.baselines.volcano import VOLCANO, VOLCANO_SEED_001

__all__ = ["BASELINES", "FIFO", "PRIORITY_KILL", "VOLCANO", "VOLCANO_SEED_001"]

BASELINES = (FIFO, PRIORITY_KILL, VOLCANO, VOLCANO_SEED_001)
