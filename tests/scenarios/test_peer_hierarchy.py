"""Peer cases for departments above teams (issue 39, DESIGN §2 "Hierarchy"): Kueue's
hierarchical-cohort and Volcano's hierarchical-queue unit tests, each read and rewritten as a
caldera scenario run through `caldera.sim.simulate`.

How a peer test becomes a scenario:
- CPU units and `nvidia.com/a100` become GPUs on one node that holds exactly the peer's total
  quota (Kueue admits against quota, caldera places on nodes: with a node of exactly the quota,
  "no quota left" and "no room left" coincide);
- a Kueue cohort with quota, or a Volcano parent queue, is a department; a ClusterQueue or a
  leaf queue is a team; a Kueue ClusterQueue in the root cohort is a top-level team; a nominal
  quota, or a Volcano `deserved`, is `deserved`, and a missing one is an explicit `{gpu: 0}` —
  except a Kueue ClusterQueue without quota inside a cohort with quota: it is a team given
  only a weight, sharing its department's deserved with its weight-only siblings, the closest
  caldera has to a quota that the cohort holds for its children;
- admitted workloads are jobs submitted to the idle cluster at t = 0, 1, …; the incoming
  workload (Kueue) or the pending pod group (Volcano) arrives at t = 600; an eviction's room is
  free after the 120 s grace period, so a preemptor that evicts starts at 720;
- priorities become job types: lower than the incoming workload is `debug`, equal or higher
  is `normal`; Volcano's `PodPreemptable: "false"` is `labels: {protected: "true"}`.

`# peer:` says what the peer's test expects; `# caldera:` says what caldera does and, where it
differs, why that is by design (DESIGN §2 "Hierarchy", §4.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from caldera.errors import ScenarioError
from caldera.sim import parse_scenario, simulate

INCOMING_AT = 600.0
STARTS_AFTER_GRACE = INCOMING_AT + 120


def job(
    name: str,
    queue: str,
    gpus: int,
    *,
    submit: float = 0,
    kind: str = "normal",
    protected: bool = False,
    **more: Any,
) -> dict[str, Any]:
    """One single-task job that loses its work when evicted (no checkpoint), so that the order
    among victims is decided by what the case says, not by a checkpoint."""
    if protected:
        more["labels"] = {"protected": "true"}
    return {
        "name": name,
        "queue": queue,
        "type": kind,
        "submit": submit,
        "duration": more.pop("duration", 20_000),
        "gpus_per_task": gpus,
        "checkpoint_on_sigterm": False,
        **more,
    }


def incoming(name: str, queue: str, gpus: int, **more: Any) -> dict[str, Any]:
    return job(name, queue, gpus, submit=INCOMING_AT, duration=3600, **more)


@dataclass(frozen=True)
class Peer:
    """One peer test as a caldera scenario and the outcome caldera gives."""

    source: str  # repository, file, test name
    gpus: int  # one node with this many GPUs
    queues: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    # every eviction, exactly: (job, reason, preemptor, t)
    evictions: list[tuple[str, str, str, float]] = field(default_factory=list)
    # first start of the jobs the case is about
    starts: dict[str, float] = field(default_factory=dict)
    refused: str | None = None  # the scenario is refused with this one-line error

    def scenario(self) -> dict[str, Any]:
        return {
            "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": self.gpus}]},
            "policy": {"grace_period": 120},
            "queues": self.queues,
            "jobs": self.jobs,
        }


# Volcano's ancestor-reclaim tree: root{ project1(1, cap 2){np(1, cap 1), p},
# project2(3, cap 4){np(3, cap 3), p} }, shared by its case2 and case3.
PROJECTS: list[dict[str, Any]] = [
    {"name": "project1", "deserved": {"gpu": 1}, "capability": {"gpu": 2}},
    {"name": "project1-np", "parent": "project1", "deserved": {"gpu": 1}, "capability": {"gpu": 1}},
    {"name": "project1-p", "parent": "project1", "deserved": {"gpu": 0}},
    {"name": "project2", "deserved": {"gpu": 3}, "capability": {"gpu": 4}},
    {"name": "project2-np", "parent": "project2", "deserved": {"gpu": 3}, "capability": {"gpu": 3}},
    {"name": "project2-p", "parent": "project2", "deserved": {"gpu": 0}},
]

KUEUE = "kubernetes-sigs/kueue pkg/scheduler/preemption/preemption_hierarchical_test.go"
VOLCANO = "volcano-sh/volcano pkg/scheduler/plugins/capacity/capacity_test.go"

CASES: dict[str, Peer] = {
    # R{ C(2){q}, q_borrowing(0) }: q_borrowing holds C's 2; q's incoming 2 takes them back.
    # peer: admitted2 (q_borrowing) is preempted, "reclamation within the cohort".
    # caldera: the same — department c is below its deserved 2 and q_borrowing (deserved 0)
    # is above its share: reclaim, whatever the priority.
    "kueue-preempt-with-hierarchical-advantage": Peer(
        source=f'{KUEUE} TestHierarchicalPreemptions "preempt with hierarchical advantage"',
        gpus=2,
        queues=[
            {"name": "c", "deserved": {"gpu": 2}},
            {"name": "q", "parent": "c"},
            {"name": "q_borrowing", "deserved": {"gpu": 0}},
        ],
        jobs=[job("admitted2", "q_borrowing", 2), incoming("in", "q", 2)],
        evictions=[("admitted2", "reclaim", "in", INCOMING_AT)],
        starts={"admitted2": 0.0, "in": STARTS_AFTER_GRACE},
    ),
    # R{ C(2){q}, q_borrowing(0), q_nominal(2) }: q_nominal runs a lower-priority workload
    # inside its own nominal quota; q_borrowing runs on C's quota.
    # peer: only admitted2 (the borrower) is preempted; admitted1 is lower priority but
    # q_nominal is within its nominal quota.
    # caldera: the same — a victim queue must be above its deserved share (§4.1 step 1), so
    # q_nominal's debug job is no candidate although it is the lowest priority and would lose
    # the least work (it checkpoints on SIGTERM).
    "kueue-avoid-queues-within-nominal-quota": Peer(
        source=f'{KUEUE} TestHierarchicalPreemptions "avoid queues within nominal quota"',
        gpus=4,
        queues=[
            {"name": "c", "deserved": {"gpu": 2}},
            {"name": "q", "parent": "c"},
            {"name": "q_borrowing", "deserved": {"gpu": 0}},
            {"name": "q_nominal", "deserved": {"gpu": 2}},
        ],
        jobs=[
            job(
                "admitted1",
                "q_nominal",
                2,
                kind="debug",
                checkpoint_on_sigterm=True,
                checkpoint_cost=0,
            ),
            job("admitted2", "q_borrowing", 2, submit=1),
            incoming("in", "q", 2),
        ],
        evictions=[("admitted2", "reclaim", "in", INCOMING_AT)],
        starts={"in": STARTS_AFTER_GRACE},
    ),
    # R{ C(2){q}, q_borrowing(0) }: q runs a lower-priority job of its own (1), q_borrowing
    # one higher-priority job (1), both admitted at the same instant; q's incoming needs 1.
    # peer: the borrower's workload is preempted, not q's own lower-priority one ("prefer to
    # preempt hierarchical candidate").
    # caldera: the same — borrowers first (§4.1 step 5): a preemptor whose queue stays within
    # its share reclaims lent room before it evicts lower-priority work of its own queue, and
    # among plans that lose the same work the one with fewer victims of its own queue wins
    # (§4.1 step 7).
    "kueue-prefer-to-preempt-hierarchical-candidate": Peer(
        source=f'{KUEUE} TestHierarchicalPreemptions "prefer to preempt hierarchical candidate"',
        gpus=2,
        queues=[
            {"name": "c", "deserved": {"gpu": 2}},
            {"name": "q", "parent": "c"},
            {"name": "q_borrowing", "deserved": {"gpu": 0}},
        ],
        jobs=[
            job("admitted1", "q_borrowing", 1),
            job("admitted2", "q", 1, kind="debug"),
            incoming("in", "q", 1),
        ],
        evictions=[("admitted1", "reclaim", "in", INCOMING_AT)],
        starts={"in": STARTS_AFTER_GRACE},
    ),
    # The same, but q's own job started one second after the borrower's.
    # peer: (not in the peer's test) Kueue's candidate order puts the borrower first whatever
    # each would lose.
    # caldera: differs by design — §4.1 step 7 ranks feasible plans by the work they lose
    # first: q's own debug job has run 1 s less, so it goes (a preempt), and the borrower
    # keeps running; borrowers first only breaks ties after that.
    "kueue-prefer-to-preempt-hierarchical-candidate-own-loses-less": Peer(
        source=f'{KUEUE} TestHierarchicalPreemptions "prefer to preempt hierarchical candidate"',
        gpus=2,
        queues=[
            {"name": "c", "deserved": {"gpu": 2}},
            {"name": "q", "parent": "c"},
            {"name": "q_borrowing", "deserved": {"gpu": 0}},
        ],
        jobs=[
            job("admitted1", "q_borrowing", 1),
            job("admitted2", "q", 1, submit=1, kind="debug"),
            incoming("in", "q", 1),
        ],
        evictions=[("admitted2", "preempt", "in", INCOMING_AT)],
        starts={"in": STARTS_AFTER_GRACE},
    ),
    # R{ C(2){q, q_same_cohort}, q_nominal(2) }: q_nominal holds its own 2 (lowest priority),
    # q_same_cohort holds C's 2 (lower priority than the incoming); q's incoming needs 2.
    # peer: q_same_cohort's workload is preempted — q borrows C's quota and, with
    # borrowWithinCohort: LowerPriority, may preempt a lower-priority workload of the cohort.
    # caldera: differs by design — nothing is evicted and `in` waits for admitted2's end. A
    # department's deserved is divided among its teams (1 each here); q asking 2 would go over
    # its own share and c over its own, and across queues caldera reclaims by shares only:
    # there is no borrowing-with-preemption by priority (§2: "may preempt" is inside one
    # queue). q_nominal is at its share and is not touched either.
    "kueue-forced-to-preempt-priority-candidate": Peer(
        source=f'{KUEUE} TestHierarchicalPreemptions "forced to preempt priority candidate"',
        gpus=4,
        queues=[
            {"name": "c", "deserved": {"gpu": 2}},
            {"name": "q", "parent": "c"},
            {"name": "q_same_cohort", "parent": "c"},
            {"name": "q_nominal", "deserved": {"gpu": 2}},
        ],
        jobs=[
            job("admitted1", "q_nominal", 2, kind="debug"),
            job("admitted2", "q_same_cohort", 2, submit=1, kind="debug", duration=7200),
            incoming("in", "q", 2),
        ],
        evictions=[],
        starts={"in": 7201.0},
    ),
    # R(1){ C(4){q, q_same_cohort}, q_borrowing }: q_borrowing holds 4 (a low- and a
    # high-priority job of 2), q_same_cohort 1 (low priority); q's incoming needs 3.
    # peer: with reclaimWithinCohort: LowerPriority, the two lower-priority workloads go
    # (q_borrowing's low one and q_same_cohort's); q_borrowing's higher-priority one stays.
    # caldera: differs by design — both of q_borrowing's jobs are reclaimed and q_same_cohort
    # keeps its job. c is below its deserved 4, so its lent room comes home first, from the
    # other department alone (§2 "Hierarchy"); equal or higher priority is no shield across
    # queues (§4.1 step 1). q_borrowing (deserved 1, R's own quota) is above its share before
    # each of the two evictions.
    "kueue-preempt-hierarchical-and-priority-candidates": Peer(
        source=(
            f'{KUEUE} TestHierarchicalPreemptions "preempt hierarchical and priority candidates"'
        ),
        gpus=5,
        queues=[
            {"name": "c", "deserved": {"gpu": 4}},
            {"name": "q", "parent": "c"},
            {"name": "q_same_cohort", "parent": "c"},
            {"name": "q_borrowing", "deserved": {"gpu": 1}},
        ],
        jobs=[
            job("admitted1", "q_borrowing", 2, kind="debug"),
            job("admitted2", "q_same_cohort", 1, submit=1, kind="debug"),
            job("admitted3", "q_borrowing", 2, submit=2),
            incoming("in", "q", 3),
        ],
        evictions=[
            ("admitted1", "reclaim", "in", INCOMING_AT),
            ("admitted3", "reclaim", "in", INCOMING_AT),
        ],
        starts={"in": STARTS_AFTER_GRACE},
    ),
    # R{ C(2){q, q_same_cohort}, C_other(2){q_other} }: q_other holds C_other's 2 (two
    # lowest-priority jobs), q_same_cohort holds C's 2 (same priority as the incoming 2).
    # peer: infeasible, nothing is preempted — C_other is within its own quota and
    # q_same_cohort's workload is not lower priority.
    # caldera: the same — c is at its deserved 2 and q (deserved 1 of c's 2) would go over its
    # own share with 2, so it may take from neither the other department nor its sibling; `in`
    # waits for admitted_same_cohort's end.
    "kueue-infeasible-preemption-pruned-subtrees": Peer(
        source=(
            f"{KUEUE} TestHierarchicalPreemptions "
            '"infeasible preemption all available workloads in pruned subtrees"'
        ),
        gpus=4,
        queues=[
            {"name": "c", "deserved": {"gpu": 2}},
            {"name": "q", "parent": "c"},
            {"name": "q_same_cohort", "parent": "c"},
            {"name": "c_other", "deserved": {"gpu": 2}},
            {"name": "q_other", "parent": "c_other"},
        ],
        jobs=[
            job("admitted_other_1", "q_other", 1, kind="debug"),
            job("admitted_other_2", "q_other", 1, submit=1, kind="debug"),
            job("admitted_same_cohort", "q_same_cohort", 2, submit=2, duration=7200),
            incoming("in", "q", 2),
        ],
        evictions=[],
        starts={"in": 7202.0},
    ),
    # r{ c11{ c21{ c31{q5}, c32{q4} }, c22{q3}, c23{q2} }, c12{q1} }: four levels of cohorts.
    # peer: q5's incoming reclaims from q1 and q2 across the whole tree.
    # caldera: differs by design — two levels only (departments above teams, KAI's depth); a
    # third level is refused in one line, not silently flattened.
    "kueue-reclaim-in-complex-hierarchy": Peer(
        source=f'{KUEUE} TestHierarchicalPreemptions "reclaim in complex hierarchy"',
        gpus=8,
        queues=[
            {"name": "c11", "deserved": {"gpu": 4}},
            {"name": "c12", "deserved": {"gpu": 4}},
            {"name": "c21", "parent": "c11"},
            {"name": "c31", "parent": "c21"},
            {"name": "q5", "parent": "c31"},
            {"name": "q1", "parent": "c12"},
        ],
        jobs=[],
        refused="has a parent itself",
    ),
    # root{ q3(4, cap 4){q31(2), q32(2), q33(0)}, q4(2) }, 8 GPUs: q4 holds 4 (2 over its
    # share), q31 holds 4 (a non-preemptable 2 and a preemptable 2); q32's pending 2.
    # peer: p7 (q31's preemptable pod, q32's sibling) is evicted; q4 keeps its 4.
    # caldera: the same — q3 is at its deserved 4, so nothing comes from the other department
    # (q4); inside q3, q32 stays within its own 2 and takes from its sibling above its share.
    # q3 is also at its capability 4: only its own teams' victims free room under that cap,
    # so the plan must free the 2 that p8 takes q3 beyond it — p7 does (`_cap_enough` in
    # core/reclaim.py; before it, `may_reclaim` refused the over-cap gang outright and p8
    # waited for p6's end, 20001, while q31 kept twice its share).
    "volcano-sibling-reclaim-inside-a-department-at-its-share": Peer(
        source=(
            f"{VOLCANO} Test_capacityPlugin_OnSessionOpenWithHierarchy "
            '"case3: Can reclaim from other queues when allocated < deserved"'
        ),
        gpus=8,
        queues=[
            {"name": "q3", "deserved": {"gpu": 4}, "capability": {"gpu": 4}},
            {"name": "q31", "parent": "q3", "deserved": {"gpu": 2}, "capability": {"gpu": 4}},
            {"name": "q32", "parent": "q3", "deserved": {"gpu": 2}, "capability": {"gpu": 4}},
            {"name": "q33", "parent": "q3", "deserved": {"gpu": 0}, "capability": {"gpu": 4}},
            {"name": "q4", "deserved": {"gpu": 2}, "capability": {"gpu": 4}},
        ],
        jobs=[
            job("p5", "q4", 4),
            job("p6", "q31", 2, submit=1, protected=True),
            job("p7", "q31", 2, submit=2),
            incoming("p8", "q32", 2),
        ],
        evictions=[("p7", "reclaim", "p8", INCOMING_AT)],
        starts={"p8": STARTS_AFTER_GRACE},
    ),
    # root{ q3(4, cap 4){q31(2), q32(2), q33(0)} }, 8 GPUs: q31 and q32 hold 2 each; q33's
    # pending 3 would take q3 to 7.
    # peer: not allocatable — the ancestor's capability is not enough, though the node has 4
    # free.
    # caldera: the same — a team's capability and its department's both cap it; p10 starts
    # only when q3 has room for it under its cap, at p9's end (p6's end alone leaves 5 > 4).
    "volcano-department-capability-caps-its-teams": Peer(
        source=(
            f"{VOLCANO} Test_capacityPlugin_OnSessionOpenWithHierarchy "
            '"case4: Pod is not allocatable when ancestor queue\'s real capability not enough"'
        ),
        gpus=8,
        queues=[
            {"name": "q3", "deserved": {"gpu": 4}, "capability": {"gpu": 4}},
            {"name": "q31", "parent": "q3", "deserved": {"gpu": 2}, "capability": {"gpu": 4}},
            {"name": "q32", "parent": "q3", "deserved": {"gpu": 2}, "capability": {"gpu": 4}},
            {"name": "q33", "parent": "q3", "deserved": {"gpu": 0}, "capability": {"gpu": 4}},
        ],
        jobs=[
            job("p6", "q31", 2, duration=3600, protected=True),
            job("p9", "q32", 2, submit=1, duration=7200),
            incoming("p10", "q33", 3),
        ],
        evictions=[],
        starts={"p10": 7201.0},
    ),
    # root{ queue1(1){queue11}, queue2 }, 4 GPUs: queue2 (no deserved) holds all 4; queue11
    # (no deserved) asks 1; ancestorReclaimLevel 1.
    # peer: p1 is evicted — the reclaim is judged on the parent's deserved.
    # caldera: the same — a department's lent room comes home to any of its teams: queue11
    # deserves 0 itself, but queue1 stays within its deserved 1 with p2.
    "volcano-reclaim-judged-on-the-departments-deserved": Peer(
        source=(
            f"{VOLCANO} Test_capacityPlugin_AncestorReclaimScenarios "
            '"case1: Can reclaim based on parent deserved when ancestorReclaimLevel is 1"'
        ),
        gpus=4,
        queues=[
            {"name": "queue1", "deserved": {"gpu": 1}},
            {"name": "queue11", "parent": "queue1", "deserved": {"gpu": 0}},
            {"name": "queue2", "deserved": {"gpu": 0}},
        ],
        jobs=[job("p1", "queue2", 4), incoming("p2", "queue11", 1)],
        evictions=[("p1", "reclaim", "p2", INCOMING_AT)],
        starts={"p2": STARTS_AFTER_GRACE},
    ),
    # root{ project1(1, cap 2){non-preemptable(1, cap 1), preemptable},
    #       project2(3, cap 4){non-preemptable(3, cap 3), preemptable} }, 4 GPUs:
    # project2's preemptable team holds all 4 (three priority-2 pods, one priority-1 pod);
    # project1's preemptable team asks 1.
    # peer: p4, the lowest-priority pod of the over-share department, is evicted.
    # caldera: the same — project1 stays within its deserved 1, project2 is above its 3; of
    # four victims that would lose the same work, the lowest W_eff (the debug job) goes.
    "volcano-cross-department-reclaim-takes-the-lowest-priority": Peer(
        source=(
            f"{VOLCANO} Test_capacityPlugin_AncestorReclaimScenarios "
            '"case2: Cross-parent reclaim pipelines project1 pending job when project2 child '
            'and parent are both over deserved"'
        ),
        gpus=4,
        queues=PROJECTS,
        jobs=[
            job("p1", "project2-p", 1),
            job("p2", "project2-p", 1),
            job("p3", "project2-p", 1),
            job("p4", "project2-p", 1, kind="debug"),
            incoming("p5", "project1-p", 1),
        ],
        evictions=[("p4", "reclaim", "p5", INCOMING_AT)],
        starts={"p5": STARTS_AFTER_GRACE},
    ),
    # The same tree: project2's preemptable team holds 3 (project2 at its share), project1's
    # preemptable team 1 (project1 at its share); project2's non-preemptable team asks 1
    # (project2's preemptable team also has one pending).
    # peer: p3, a pod of the sibling team inside project2, is evicted.
    # caldera: the same — project2 would go over its share with p6, so nothing comes from
    # project1 (which is at its own); inside project2, p6's team stays within its 3 and takes
    # from its sibling: the job that would lose the least work (started last) goes.
    "volcano-sibling-reclaim-when-the-department-is-at-its-share": Peer(
        source=(
            f"{VOLCANO} Test_capacityPlugin_AncestorReclaimScenarios "
            '"case3: Cross-parent reclaim can evict sibling-queue victim first"'
        ),
        gpus=4,
        queues=PROJECTS,
        jobs=[
            job("p1", "project2-p", 1),
            job("p2", "project2-p", 1, submit=1),
            job("p3", "project2-p", 1, submit=2),
            job("p5", "project1-p", 1, submit=3),
            job("p4", "project2-p", 1, submit=4),
            incoming("p6", "project2-np", 1),
        ],
        evictions=[("p3", "reclaim", "p6", INCOMING_AT)],
        starts={"p6": STARTS_AFTER_GRACE},
    ),
    # root{ parent1(1){child1(1), child1_sibling}, parent2(1){child2(1)} }: child1 holds its
    # own 1, child1_sibling 1 on a non-preemptable pod; child2 asks 1.
    # peer: blocked, nothing evicted — parent1 is over its deserved but the victim's own queue
    # (child1) is not. (The peer's node has one a100 under two running pods; here the node
    # has the 2 GPUs they hold.)
    # caldera: the same — floors at both levels: a victim's queue must be above its own
    # deserved share, and child1_sibling's job is protected; child2 waits for p1's end.
    "volcano-a-team-at-its-share-keeps-its-job": Peer(
        source=(
            f"{VOLCANO} Test_capacityPlugin_AncestorReclaimScenarios "
            '"case4: Cross-parent reclaim is blocked when victim child is not over deserved"'
        ),
        gpus=2,
        queues=[
            {"name": "parent1", "deserved": {"gpu": 1}},
            {"name": "child1", "parent": "parent1", "deserved": {"gpu": 1}},
            {"name": "child1_sibling", "parent": "parent1", "deserved": {"gpu": 0}},
            {"name": "parent2", "deserved": {"gpu": 1}},
            {"name": "child2", "parent": "parent2", "deserved": {"gpu": 1}},
        ],
        jobs=[
            job("p1", "child1", 1, duration=7200),
            job("p3", "child1_sibling", 1, submit=1, protected=True),
            incoming("p2", "child2", 1),
        ],
        evictions=[],
        starts={"p2": 7200.0},
    ),
    # root{ parent(4, cap 4){queue-a, queue-b} }, 2 GPUs: neither leaf sets deserved;
    # queue-b holds both GPUs, queue-a asks 2; ancestorReclaimLevel 1.
    # peer: blocked — a leaf without deserved deserves nothing, and the parent's deserved is
    # no gate between two children of the same parent.
    # caldera: the same outcome for another reason — a team given only a weight deserves
    # weight / Σ its siblings' weights of its department's deserved (2 each here, DESIGN §2),
    # so queue-b, holding exactly its 2, is not above its share and is no victim; queue-a
    # waits for p-victim's end.
    "volcano-teams-without-deserved-split-their-departments-share": Peer(
        source=(
            f"{VOLCANO} Test_capacityPlugin_AncestorReclaimScenarios "
            '"case8: level 1 blocks sibling reclaim when leaf deserved is unset and no '
            'ancestor gate applies"'
        ),
        gpus=2,
        queues=[
            {"name": "parent", "deserved": {"gpu": 4}, "capability": {"gpu": 4}},
            {"name": "queue-a", "parent": "parent"},
            {"name": "queue-b", "parent": "parent"},
        ],
        jobs=[job("p-victim", "queue-b", 2, duration=7200), incoming("p-reclaimer", "queue-a", 2)],
        evictions=[],
        starts={"p-reclaimer": 7200.0},
    ),
}


PARAMS = [pytest.param(case, id=name) for name, case in CASES.items()]


@pytest.mark.parametrize("case", PARAMS)
def test_peer_case(case: Peer) -> None:
    if case.refused is not None:
        with pytest.raises(ScenarioError, match=case.refused) as refused:
            parse_scenario(case.scenario())
        assert "\n" not in str(refused.value)
        return
    outcome = simulate(parse_scenario(case.scenario()))
    evictions = [
        (e["job"], e["reason"], e["preemptor"], e["t"])
        for e in outcome["events"]
        if e["kind"] == "evict"
    ]
    assert sorted(evictions) == sorted(case.evictions)
    first_start = {j["name"]: j["start"] for j in outcome["jobs"]}
    assert {name: first_start[name] for name in case.starts} == case.starts
    assert outcome["metrics"]["gang_hang_gpu_hours"] == 0


def test_every_case_names_its_source() -> None:
    for name, case in CASES.items():
        assert name.startswith(("kueue-", "volcano-"))
        assert case.source.startswith(KUEUE if name.startswith("kueue-") else VOLCANO)
