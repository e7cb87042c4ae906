"""Who may be a victim for preempt (V6) and reclaim (V7), and in what order.

Two views of the same rules: `victim_nodes` bounds them once per (phase, queue, priority)
with their fixed parts (`preempt_rule`, `reclaim_rule`, kept by the running ledger from cycle
to cycle), and `victims_on` lists one node's eligible tasks in `victim_order` as the plugins
of the first tier allow them (`tier`). Reads the session; evicts nothing (`evict` does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from caldera.baselines.common import is_protected
from caldera.baselines.volcano.session import Pod, Session
from caldera.baselines.volcano.tier import drf_allows, gang_allows, proportion_allows
from caldera.core.decisions import EvictReason
from caldera.core.snapshot import JobView
from caldera.model import Queue

__all__ = [
    "VictimRule",
    "preempt_rule",
    "reclaim_rule",
    "victim_nodes",
    "victim_order",
    "victims_on",
]

VictimRule = Callable[[Session, JobView, Pod], bool]
"""(session, preemptor, running task) -> may this task be a victim right now?"""


def victim_order(session: Session, pod: Pod) -> tuple[int, int, float, int, str]:
    """V6, victims: 1. lower job priority first; 2. ready jobs first; 3. newest task first
    (latest started job, then highest index); 4. job id."""
    job, index = pod
    ready = session.running(job) >= job.spec.min_available
    started = job.first_start if job.first_start is not None else 0.0
    return (job.spec.priority, 0 if ready else 1, -started, -index, job.id)


def victim_nodes(session: Session, job: JobView, reason: EvictReason) -> dict[int, int]:
    """Nodes holding tasks that could ever be victims for `job` in this phase (the parts of
    the rules that do not change within the cycle), with those tasks' milli-GPUs. The ledger
    keeps them from cycle to cycle; jobs evicted whole or started this cycle are taken out
    here. Once per (phase, queue, priority)."""
    spec = job.spec
    preempting = reason is EvictReason.PREEMPT
    key = (reason.value, spec.queue, spec.priority if preempting else 0, session.one_tier)
    found = session.victim_nodes.get(key)
    if found is None:
        rule = (
            preempt_rule(spec.queue, spec.priority, session.one_tier)
            if preempting
            else reclaim_rule(spec.queue, session.cycle.snapshot.queues)
        )
        ledger = session.ledger
        gpus, pods = ledger.victims_where(key, rule)
        out = [
            victim
            for job_id in session.gone | session.cycle.decided.started
            if (victim := ledger.views.get(job_id)) is not None
            and not is_protected(victim)
            and rule(victim)
        ]
        if out:
            gpus, pods = dict(gpus), dict(pods)  # the ledger's own stay as they are
            for victim in out:
                for node, (_, indexes) in ledger.on_node_of(victim):
                    count = pods[node] - len(indexes)
                    if count:
                        pods[node] = count
                        gpus[node] -= victim.spec.gpu * len(indexes)
                    else:
                        del pods[node], gpus[node]
        session.victim_nodes[key] = found = gpus
    return found


def preempt_rule(queue: str, priority: int, one_tier: bool) -> Callable[[JobView], bool]:
    """V6 victims' fixed part: the preemptor's queue, strictly lower priority; S1: under
    seed 001's single tier, only jobs above their gang minimum."""

    def rule(victim: JobView) -> bool:
        return (
            victim.spec.queue == queue
            and victim.spec.priority < priority
            and (not one_tier or len(victim.placement) > victim.spec.min_available)
        )

    return rule


def reclaim_rule(queue: str, queues: Mapping[str, Queue]) -> Callable[[JobView], bool]:
    """V7 victims' fixed part: another, reclaimable queue; jobs above their gang minimum."""

    def rule(victim: JobView) -> bool:
        owner = queues.get(victim.spec.queue)
        return (
            victim.spec.queue != queue
            and owner is not None
            and owner.reclaimable
            and len(victim.placement) > victim.spec.min_available
        )

    return rule


def victims_on(
    session: Session,
    job: JobView,
    node: int,
    rule: VictimRule,
    reclaiming: bool,
    holding: int = 0,
) -> list[Pod]:
    """Eligible victims on `node` in victim order. For reclaim, each victim job offers only
    its tasks above `min_available` (the gang plugin counts them down as it lists them).
    Under seed 001's single tier (S1-S3) the plugins of that tier each judge the same list
    and only the tasks all of them allow are victims."""
    victims = sorted(
        (
            pod
            for pod in session.pods_on(node)
            if not is_protected(pod[0])
            and pod[0].id not in session.gone
            and pod[0].id not in session.cycle.decided.started  # bound this cycle: not yet a victim
            and not session.evictions.is_cut(*pod)
            and rule(session, job, pod)
        ),
        key=lambda p: victim_order(session, p),
    )
    if session.one_tier:
        allowed = gang_allows(session, victims)
        if reclaiming:
            allowed &= proportion_allows(session, victims)
        else:
            allowed &= drf_allows(session, job, holding, victims)
        return [pod for i, pod in enumerate(victims) if i in allowed]
    if not reclaiming:
        return victims
    return [victims[i] for i in sorted(gang_allows(session, victims))]
