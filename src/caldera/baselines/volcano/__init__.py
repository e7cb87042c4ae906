"""`volcano`: Volcano with preempt and reclaim enabled (its CI configuration), BASELINES.md.

Points V1–V9 are BASELINES.md's numbered points for `volcano`; the phases cite them.
  V1. A cycle on a snapshot; pipelined placements are dropped when it ends. Cadence: Volcano
      loops every 1 s; the simulator runs a cycle at every event instant. Between events the
      snapshot does not change, and nothing Volcano decides depends on the clock itself, so
      a 1 s loop would repeat the same answer — with one exception: jobs bound in a cycle
      are no victims in that cycle, but are in the next. So when a cycle starts a job that a
      job still starving could take, `volcano_close` asks for a cycle 1 s later (a wake-up).
      Decisions come up to 1 s earlier than Volcano's; otherwise the cadences agree.
  V2. Queue deserved by water-filling, share = max over resources (`proportion`).
  V3. Order: queues by share ascending; jobs by priority descending, then not-ready first,
      then creation time; tasks by index (all of a job's tasks are alike here).
  V4. Allocate: a queue whose allocation reaches deserved in every resource is skipped; each
      task must keep the queue within deserved; it goes to the best node with idle room for
      it (binpack score), else it is pipelined onto room being released; a gang whose task
      fits nowhere is given up. A job binds only when ready (running + placed) reaches
      `min_available`; pipelined room is held only until the cycle ends.
  V5. Starving = ready + pipelined < `min_available`: only starving jobs preempt or reclaim.
  V6. Preempt, inside a queue: per pending task of a starving job (not `Never`), nodes by
      descending score, one node per task; victims are running tasks of strictly
      lower-priority jobs of the same queue, never kube-system or system-critical; the gang
      minimum of victims is NOT protected; victims in order: lower job priority, then ready
      jobs first, then the newest task; evict one at a time until the task fits on that node;
      keep the job's evictions only if the whole job becomes placeable (pipelined), else roll
      back (the Statement).
  V7. Reclaim, across queues: starving jobs of queues below deserved take running tasks of
      other queues not marked `reclaimable: false`, but only tasks above the victim job's
      `min_available` (the gang check in the first tier settles it, the deserved check of
      the victim's queue is never reached); nodes in plain order; same greedy eviction.
  V8. A victim gets the 30 s grace period and no checkpoint signal; the preemptor gets no
      reservation across cycles (see `baseline_defaults`; nothing here nominates).
  V9. No throttle, no dynamic weight, no cost- or progress-aware victim order, no cooldown.

`volcano-seed001` (`VOLCANO_SEED_001`) is the same scheduler configured as seed 001 is
(actions enqueue, allocate, preempt, reclaim, backfill; priority, gang, conformance, drf,
predicates, proportion and nodeorder in ONE tier): points S1-S4 (`tier` and `nodeorder`) say
what that changes, each citing Volcano's source. Everything else is as above.

Modelling choices (docs/baselines.md says more):
- Node score is binpack on GPUs (the configuration GPU clusters run); ties by node index.
  (`volcano-seed001` scores nodes as seed 001's nodeorder does instead: S4.)
- A hard topology constraint is honoured as Volcano's network-topology (hypernode) mode: a
  gang's tasks go inside one tier-N domain; preempt and reclaim try one domain at a time,
  the one with the most room first.
- Volcano's enqueue gate (overcommit) is not modelled: every pending job within its queue's
  capability is Inqueue. Its backfill action only places pods that request nothing, which
  no job here is, so it is left out.
- ValidateVictims is kept: a node with no eligible victim is never a preempt/reclaim target,
  even if it has room.
- Reclaim works a job at a time (all its tasks) where Volcano round-robins single tasks over
  queues; the outcome for one job is the same, the interleaving between jobs is not.

One module per action, as Volcano lays out pkg/scheduler/actions, and its framework beside:
  session    the cycle's session (framework/session.go): rooms, queue shares, the Statement,
             starving jobs; the job order (V3).
  allocate   V3-V5; preempt V6; reclaim V7; close V1 (the wake-up). enqueue is the core's.
  victims    who may be a victim and in what order (V6, V7); evict, the greedy per-task
             eviction inside the Statement that preempt and reclaim share.
  tier       the plugins' victim rules, the single tier of seed 001 (S1-S3).
  nodeorder  nodeorder's scores (S4); nodestates, which nodes look alike to it, kept across
             placements.
"""

from __future__ import annotations

from collections.abc import Callable

from caldera.baselines.common import baseline_defaults
from caldera.baselines.volcano.allocate import volcano_allocate
from caldera.baselines.volcano.close import volcano_close
from caldera.baselines.volcano.nodeorder import nodeorder_place, nodeorder_score
from caldera.baselines.volcano.preempt import volcano_preempt
from caldera.baselines.volcano.reclaim import volcano_reclaim
from caldera.baselines.volcano.session import session_for, volcano_job_order
from caldera.baselines.volcano.victims import victim_order
from caldera.core.context import CycleContext
from caldera.core.enqueue import enqueue
from caldera.core.policy import Policy

__all__ = [
    "VOLCANO",
    "VOLCANO_SEED_001",
    "nodeorder_place",
    "nodeorder_score",
    "victim_order",
    "volcano_allocate",
    "volcano_close",
    "volcano_job_order",
    "volcano_preempt",
    "volcano_reclaim",
]

VOLCANO = Policy(
    name="volcano",
    phases=(enqueue, volcano_allocate, volcano_preempt, volcano_reclaim, volcano_close),
    description="Volcano with preempt and reclaim: proportion, gang, per-task greedy victims",
    defaults=baseline_defaults,
)


def _seed_001(phase: Callable[[CycleContext], None]) -> Callable[[CycleContext], None]:
    """`phase` in a session opened with seed 001's single tier (S1-S4)."""

    def run(cycle: CycleContext) -> None:
        session_for(cycle, one_tier=True)
        phase(cycle)

    run.__name__ = run.__qualname__ = f"{phase.__name__}_seed001"
    run.__doc__ = phase.__doc__
    return run


VOLCANO_SEED_001 = Policy(
    name="volcano-seed001",
    phases=(
        enqueue,
        *(
            _seed_001(p)
            for p in (volcano_allocate, volcano_preempt, volcano_reclaim, volcano_close)
        ),
    ),
    description="Volcano as seed 001 configures it: one tier, so gang and drf judge preempt "
    "victims and proportion judges reclaim victims (S1-S3); nodeorder spreads pods (S4)",
    defaults=baseline_defaults,
)
