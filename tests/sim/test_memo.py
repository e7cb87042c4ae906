"""The search memo (core/shortcuts/memo.py) and the quiet cycles answered from it
(core/shortcuts/quiet.py) change no decision: random workloads simulated with and without them
give the same output document — every event, placement and metric — and every cycle answered
from a quiet record decides exactly what the phases decide on the same snapshot (decisions,
notes, memo entries, hits and the record handed on).

The workloads are crowded on purpose (many jobs on few GPUs, arriving close together) so
that victim searches fail and the memo is consulted; `test_the_memo_is_used` and
`test_quiet_cycles_are_answered_from_the_record` check that it is, so that the equality is
not vacuous."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.core import Decisions, SearchMemo, Snapshot, run
from caldera.core.context import CycleContext
from caldera.sim import Simulator, parse_scenario

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sim_properties import scenarios


def _memo_state(memo: SearchMemo | None) -> tuple[object, ...]:
    """What a memo hands on, with the record's heads as a set (their order is the pending
    groups' and changes nothing)."""
    if memo is None:
        return (None,)
    quiet = memo.quiet
    record = None
    if quiet is not None:
        record = (quiet.at, quiet.groups, frozenset(quiet.heads), dict(quiet.throttles))
    return (memo.stamp, dict(memo.failed), memo.hits, record)


class ReplayChecked(Simulator):
    """The simulator, running the phases as well — without the quiet record — on every cycle
    that had one (answered from it, or run with a plan it found) and noting any difference."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.differences: list[str] = []

    def _apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        if snapshot.memo is not None and snapshot.memo.quiet is not None:
            full = run(replace(snapshot, memo=replace(snapshot.memo, quiet=None)), self.policy)
            assert full.memo is not None and not full.memo.replayed
            if (
                decisions != full
                or decisions.notes != full.notes
                or _memo_state(decisions.memo) != _memo_state(full.memo)
            ):
                self.differences.append(f"t={snapshot.now}: {decisions} != {full}")
        super()._apply(decisions, snapshot)


def _simulate(data: dict[str, Any], memoize: bool) -> tuple[dict[str, Any], int, int]:
    """The output document, the memo's hits and the quiet cycles answered from a record."""
    simulator = ReplayChecked(parse_scenario(data, Path.cwd(), "memo"), memoize=memoize)
    simulator.run()
    assert simulator.differences == []
    return simulator.result(), simulator.memo_hits, simulator.quiet_cycles


@st.composite
def _crowded(draw: st.DrawFn) -> dict[str, Any]:
    """Crowded random workloads, sometimes with the policy settings the memo and the quiet
    cycles read (back-off, lossy patience, nomination timeout, no throttle)."""
    data = draw(scenarios(max_nodes=3, max_jobs=30))
    policy = data["policy"]
    if draw(st.booleans()):
        policy["preempt_backoff"] = draw(st.sampled_from([0, 30, 600]))
    if draw(st.integers(0, 3)) == 0:
        policy["lossy_patience"] = draw(st.sampled_from([600, 3600]))
    if draw(st.integers(0, 3)) == 0:
        policy["nomination_timeout"] = draw(st.sampled_from([60, 300]))
    if draw(st.integers(0, 5)) == 0:
        policy["throttle"] = False
    return data


@settings(max_examples=40, deadline=None)
@given(_crowded())
def test_decisions_are_identical_with_and_without_the_memo(data: dict[str, Any]) -> None:
    cached, _, _ = _simulate(data, memoize=True)
    plain, hits, quiet = _simulate(data, memoize=False)
    assert hits == 0 and quiet == 0  # memoize=False turns both off
    assert cached == plain


def test_the_memo_is_used() -> None:
    """A full cluster of critical work (never a victim) and a backlog of large jobs arriving
    one a minute, after each preemption backoff: the head's search fails once and is not
    repeated while nothing that could change its answer happens."""
    running = [
        {
            "name": f"serve{i}",
            "queue": "team",
            "type": "critical",
            "submit": 0,
            "duration": 7200,
            "gpus_per_task": 8,
        }
        for i in range(2)
    ]
    waiting = [
        {
            "name": f"train{i}",
            "queue": "team",
            "type": "large-job",
            "submit": 60 * (i + 1),
            "duration": 600,
            "gpus_per_task": 8,
        }
        for i in range(20)
    ]
    data = {
        "cluster": {"nodes": [{"prefix": "n", "count": 2, "gpus": 8}]},
        "queues": [{"name": "team", "weight": 1}],
        "jobs": running + waiting,
    }
    cached, hits, _ = _simulate(data, memoize=True)
    plain, _, _ = _simulate(data, memoize=False)
    assert hits >= 10
    assert cached == plain


def test_quiet_cycles_are_answered_from_the_record() -> None:
    """A small backlog in four queues (the `burst` generator): most cycles that decide
    nothing follow one that decided nothing, and are answered from its record — each checked
    against the phases."""
    burst = {"kind": "burst", "seed": 5, "jobs": 50, "nodes": 3}
    data = {"workload": {"generators": [burst]}}
    cached, hits, quiet = _simulate(data, memoize=True)
    plain, _, _ = _simulate(data, memoize=False)
    assert quiet >= 1000
    assert hits > 0
    assert cached == plain


def test_searches_of_a_quiet_check_that_found_a_plan_are_handed_to_the_phases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the quiet check's own search finds a plan, the phases run, and take that check's
    search answers instead of searching again (core/shortcuts/quiet.py, 5): taken at least once
    here, and every such cycle decides what it decides without a record (`ReplayChecked`)."""
    from caldera.core.shortcuts.searches import SearchCache

    taken: list[str] = []
    original = SearchCache.known_search

    def counted(self: SearchCache, job: Any, units: int, undecided: bool) -> Any:
        answer = original(self, job, units, undecided)
        if answer[0]:
            taken.append(job.id)
        return answer

    monkeypatch.setattr(SearchCache, "known_search", counted)
    burst = {"kind": "burst", "seed": 5, "jobs": 50, "nodes": 3}
    data = {"workload": {"generators": [burst]}}
    cached, _, _ = _simulate(data, memoize=True)
    assert taken
    plain, _, _ = _simulate(data, memoize=False)
    assert cached == plain


def test_pools_shared_while_undecided_are_the_pools_built_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A victim pool (or a pool's candidate list) made while the cycle had decided nothing
    is taken by later phases of the cycle, and by the phases after a quiet check, while they
    too decided nothing (pools.VictimPools): every time one is taken here, the pool built
    afresh at that point holds the same units in the same order."""
    from caldera.core.pools import VictimPools
    from caldera.core.victims import VictimIndex

    taken: list[object] = []
    original = VictimPools._shared

    def checked(self: VictimPools, key: Any) -> object | None:
        shared = original(self, key)
        if shared is None:
            return None
        fresh = VictimPools(self.cycle)
        fresh._undecided = {}  # nothing to take: everything built again now
        if key == ("ceiling",):  # the borrowers at the W_eff ceiling, by expected end
            assert fresh._ceiling() == shared
            taken.append(key)
            return shared
        # (kind, queue, priority, ceiling borrowers waited for); ("chosen", *that)
        pool = key[1:] if key[0] == "chosen" else key
        job = next(
            j
            for j in self.cycle.jobs.values()
            if self._key(str(pool[0]), j) == pool  # type: ignore[comparison-overlap]
        )
        if isinstance(shared, VictimIndex):
            kind = key[0]
            again = fresh.combined(job) if kind == "combined" else fresh._index(kind, job)
            assert [(u.job.id, u.tasks, u.key) for u in again.units] == [
                (u.job.id, u.tasks, u.key) for u in shared.units
            ]
        else:
            # (candidates, the queue's lower-priority jobs passed over: own pools only)
            chosen, passed_over = shared  # type: ignore[misc]
            if key[1] == "own":
                again_chosen, again_passed = fresh._own_jobs(job)
                assert [v.id for v in again_passed] == [v.id for v in passed_over]
            else:
                again_chosen, again_passed = fresh._borrowed_jobs(job), []
                assert passed_over == again_passed
            assert [v.id for v in again_chosen] == [v.id for v in chosen]
        taken.append(key)
        return shared

    monkeypatch.setattr(VictimPools, "_shared", checked)
    burst = {"kind": "burst", "seed": 5, "jobs": 80, "nodes": 3}
    _simulate({"workload": {"generators": [burst]}}, memoize=True)
    kinds = {key[1] if key[0] == "chosen" else key[0] for key in taken}  # type: ignore[index]
    assert {"own", "borrowers", "combined"} <= kinds  # both lists and every kind of pool


def test_a_start_in_the_cycle_unsettles_failed_searches() -> None:
    """The case hypothesis found (tests/sim/found/memo-start-frees-reservation.yaml): nothing
    changed since a search failed, but a critical job submitted now starts in the critical
    pass, its queue can no longer hold a starving large job's reservation within its
    capability, and the room reserved for that job is free: the search now finds a plan. A
    cycle that has decided something takes no answer from the memo
    (`SearchCache.known_failure`)."""
    import yaml

    path = Path(__file__).resolve().parent / "found" / "memo-start-frees-reservation.yaml"
    data = yaml.safe_load(path.read_text())
    # Found before evictions were timed to checkpoints (core/timing.py): that moves j9's
    # eviction at 1980 to 2101, and the case at 3000 no longer arises.
    data.setdefault("policy", {})["checkpoint_wait"] = 0
    cached, hits, _ = _simulate(data, memoize=True)
    plain, _, _ = _simulate(data, memoize=False)
    assert hits > 0
    assert cached == plain
    evicted_by_j13 = [e for e in plain["events"] if e.get("preemptor") == "j13"]
    assert [e["t"] for e in evicted_by_j13] == [3000.0, 3000.0]


def test_with_pack_with_victims_nothing_is_taken_from_the_memo() -> None:
    """The case hypothesis found (tests/sim/found/memo-pack-with-victims.yaml): with
    `pack_with_victims` a critical start deferred to look for victims on the leaves holding
    critical work depends on which leaves hold it, which the memo's stamps do not record; a
    settled search or a quiet cycle changed the run (a large job started 30 s later, a normal
    job missed its SLO). With that rule on the memo is not used (`shortcuts.searches.exact_for`)."""
    import yaml

    path = Path(__file__).resolve().parent / "found" / "memo-pack-with-victims.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["policy"]["pack_with_victims"] is True
    cached, hits, quiet = _simulate(data, memoize=True)
    plain, _, _ = _simulate(data, memoize=False)
    assert (hits, quiet) == (0, 0)
    assert cached == plain
    data["policy"]["pack_with_victims"] = False  # the memo still serves the rule off
    _, hits, quiet = _simulate(data, memoize=True)
    assert hits + quiet > 0


def test_a_search_a_veto_made_order_dependent_is_not_settled() -> None:
    """The case hypothesis found (tests/sim/found/memo-veto-order.yaml): a reclaim search
    fails because the floor veto turns away a unit once earlier units of its queue took the
    queue down to its share; later, with nothing else changed, the candidates' order has moved
    (lost work, weights) and the same search finds a plan. Such a failure is not settled
    (`SearchCache.order_mattered`)."""
    import yaml

    path = Path(__file__).resolve().parent / "found" / "memo-veto-order.yaml"
    data = yaml.safe_load(path.read_text())
    cached, _, _ = _simulate(data, memoize=True)
    plain, _, _ = _simulate(data, memoize=False)
    assert cached == plain
    reclaimed = [(e["t"], e["job"]) for e in plain["events"] if e.get("preemptor") == "j14"]
    assert reclaimed == [(2580.0, "j8")]


def test_a_quiet_check_stops_searching_once_it_found_a_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When a quiet check's searches decide something, the phases run instead and take only
    the searches before that decision (core/shortcuts/quiet.py, 5): the check runs none after
    it. (This workload's checks ran 117 searches after a plan before they stopped there.)"""
    from caldera.core import preempt, reclaim
    from caldera.core.shortcuts import quiet
    from caldera.core.shortcuts.searches import Handover

    seen = {"in a check": False, "after a decision": 0, "handed over": 0}
    for module in (preempt, reclaim):
        original = module.search

        def counted(cycle: CycleContext, *args: Any, _search: Any = original, **kw: Any) -> Any:
            if seen["in a check"] and not cycle.undecided:
                seen["after a decision"] += 1
            return _search(cycle, *args, **kw)

        monkeypatch.setattr(module, "search", counted)
    search_unsettled = quiet._search_unsettled

    def watched(*args: Any) -> Any:
        seen["in a check"] = True
        try:
            answer = search_unsettled(*args)
        finally:
            seen["in a check"] = False
        seen["handed over"] += isinstance(answer, Handover)
        return answer

    monkeypatch.setattr(quiet, "_search_unsettled", watched)
    burst = {"kind": "burst", "seed": 7, "jobs": 600, "nodes": 40}
    _simulate({"workload": {"generators": [burst]}}, memoize=True)
    assert seen["handed over"] > 0
    assert seen["after a decision"] == 0


def test_a_window_edge_unsettles_failed_searches() -> None:
    """The case hypothesis found (tests/sim/found/memo-window-reservation.yaml): a queue's
    window closes, its starving large job is held and the room reserved for it is free, so a
    search the memo held as failed now finds a plan. Failed searches last no longer than the
    next window edge (SearchCache.record_failure)."""
    import yaml

    path = Path(__file__).resolve().parent / "found" / "memo-window-reservation.yaml"
    data = yaml.safe_load(path.read_text())
    cached, _, _ = _simulate(data, memoize=True)
    plain, _, _ = _simulate(data, memoize=False)
    # (No memo hit is asked for: since a cycle that decided something takes none, this
    # case's hits are gone, but a memo entry that outlived the edge still changed the run.)
    assert cached == plain


def test_a_pending_large_job_that_leaves_unsettles_failed_searches() -> None:
    """A pending large job may hold room its cycle reserved while it starved; when it leaves
    the pending set without starting (held, cancelled) that room is the others', so the job
    index's version moves and the memo forgets its failed searches. Other pending jobs that
    leave took nothing and keep it."""
    from caldera.core import JobIndex
    from caldera.core.views import JobView
    from caldera.model import JobSpec, JobState, JobType

    large = JobView(JobSpec("big", "big", "q", JobType.LARGE, 0.0, gpu=8000), JobState.PENDING)
    small = JobView(JobSpec("s", "s", "q", JobType.NORMAL, 0.0, gpu=1000), JobState.PENDING)
    index = JobIndex([large, small])
    before = index.version
    index.drop("s")
    assert index.version == before
    index.put(replace(large, state=JobState.HELD))
    assert index.version == before + 1
    index.drop("big")
    assert index.version == before + 1  # a held job holds no reservation
    index.put(large)
    index.drop("big")
    assert index.version == before + 2


def test_quiet_cycles_follow_the_policys_property_not_its_identity() -> None:
    """Quiet cycles are switched by `Policy.remembers_quiet_cycles`, which `CALDERA` sets: the
    same phases under a policy that leaves it off run every cycle (no cycle answered from a
    record) and decide exactly the same; a copy of `CALDERA` under another name keeps it."""
    from caldera.core import CALDERA

    assert CALDERA.remembers_quiet_cycles
    burst = {"kind": "burst", "seed": 5, "jobs": 150, "nodes": 12}
    scenario = parse_scenario({"workload": {"generators": [burst]}}, Path.cwd(), "flag")
    outputs = {}
    for policy in (
        CALDERA,
        replace(CALDERA, name="caldera-copy"),
        replace(CALDERA, remembers_quiet_cycles=False),
    ):
        simulator = Simulator(scenario, policy=policy)
        simulator.run()
        outputs[policy] = (simulator.quiet_cycles, simulator.result())
    (on, document), (copied, copy_document), (off, off_document) = outputs.values()
    assert on > 0 and copied == on and off == 0
    assert copy_document == document and off_document == document


def test_quiet_cycles_while_a_timed_eviction_waits() -> None:
    """A nominated preemptor waiting for victims timed to their checkpoints (core/timing.py)
    does not keep the cycles around it from being recorded: the back-off wake-ups and arrivals
    that decide nothing while it waits are answered from the record — each checked against
    the phases (`ReplayChecked`), with the waiting nomination's next signal as their wake-up —
    and a record is never answered once a victim it waits for is due (quiet.py, 2). (Before,
    a cycle with such a nomination was never recorded: none was answered.)"""
    from caldera.core.shortcuts.quiet import replay
    from caldera.core.timing import next_signal

    class Watched(ReplayChecked):
        answered = 0
        refused_when_due = 0

        def _apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
            memo = decisions.memo
            if memo is not None and memo.replayed and memo.quiet and memo.quiet.signalling:
                self.answered += 1
                nominated = snapshot.job_index.nominated
                for holder in memo.quiet.signalling:
                    nomination = nominated[holder].nomination
                    assert nomination is not None and nomination.pending
                    signal = next_signal(nomination.pending, snapshot.now)
                    assert signal > snapshot.now
                    assert decisions.wakeup is not None and decisions.wakeup <= signal
                    due = replace(snapshot, now=signal, memo=memo)
                    assert replay(due) is None
                    self.refused_when_due += 1
            super()._apply(decisions, snapshot)

    burst = {"kind": "burst", "seed": 3, "jobs": 300, "nodes": 40}
    data = {"workload": {"generators": [burst]}}
    simulator = Watched(parse_scenario(data, Path.cwd(), "memo"), memoize=True)
    simulator.run()
    assert simulator.differences == []
    assert simulator.answered >= 100 and simulator.refused_when_due >= 100
    plain, _, _ = _simulate(data, memoize=False)
    assert simulator.result() == plain


def test_commitments_kept_with_the_index_are_those_derived_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the nominations' plans commit at a cycle's start is kept with the job index
    until its version moves (`JobIndex.at_version`, context._Commitments): every time it is
    taken from there, it equals what the index gives afresh — the victims claimed and
    committed, per victim and per queue, and the own-queue victims of reclaimers."""
    from caldera.core import JobIndex
    from caldera.core.context import _Commitments

    taken: list[str] = []
    original = JobIndex.at_version

    def checked(self: JobIndex, key: Any, build: Any) -> Any:
        fresh = key[0] == "commitments" and self._derived.get(key, (None,))[0] == self.version
        value = original(self, key, build)
        if fresh:
            again = _Commitments.of(self, key[1])
            assert value == again
            assert list(value.committed_by) == list(again.committed_by)  # the same order
            taken.append(key[0])
        return value

    monkeypatch.setattr(JobIndex, "at_version", checked)
    burst = {"kind": "burst", "seed": 3, "jobs": 300, "nodes": 40}
    simulator = Simulator(parse_scenario({"workload": {"generators": [burst]}}, Path.cwd(), "c"))
    simulator.run()
    assert len(taken) >= 100
