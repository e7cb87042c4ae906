"""The cycle's other rules, one small case each: weight, admission, enqueue, allocate order,
throttle, reservations and the budget's one-unit exception (DESIGN §2-§4)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from invariant_checks import violations

from builders import (
    JobBuilder,
    cluster,
    decided_evictions,
    decided_starts,
    job,
    queue,
    snapshot,
)
from caldera.core import (
    CALDERA,
    Hold,
    Nomination,
    PendingVictim,
    PolicyConfig,
    Release,
    TaskPlacement,
    Throttle,
    ThrottleOff,
    ThrottleOn,
    admit,
    effective_weight,
    run,
)
from caldera.model import (
    PRIORITY_CLASSES,
    TRANSITIONS,
    IllegalTransition,
    JobState,
    JobType,
    Node,
    PreemptionPolicy,
    PriorityClass,
    check_transition,
)

HOUR = 3600.0
NOW = 10 * HOUR


# -- effective weight (§4.2) ----------------------------------------------------------------


WEIGHT_CASES = [
    ("fresh normal job: its base priority", job("j").running(since=NOW).on("n-0"), NOW, 100.0),
    # 100 + 100·ln(1 + 1)
    ("one hour run", job("j").running(since=NOW - HOUR).on("n-0"), NOW, 100 + 100 * math.log(2)),
    # 100 + 100·ln(1 + 2) + 600·0.5²
    (
        "two hours, half done",
        job("j").expected(4 * HOUR).running(since=NOW - 2 * HOUR).on("n-0"),
        NOW,
        100 + 100 * math.log(3) + 150,
    ),
    # 100 + 100·ln(11) + 600·0.81 ≈ 825.8 → the ceiling
    (
        "10 h, 90 % done: capped at 800",
        job("j").progress(0.9).running(since=0).on("n-0"),
        NOW,
        800.0,
    ),
    # 800 + anything → still 800: the ceiling is the large band itself
    ("a large job never rises above 800", job("j").large().running(since=0).on("n-0"), NOW, 800.0),
    ("critical is 1000 regardless", job("j").critical().running(since=0).on("n-0"), NOW, 1000.0),
    # 50 + 100·ln(11): debug defends itself against normal jobs after ~39 min
    ("debug after 10 h", job("j").debug().running(since=0).on("n-0"), NOW, 50 + 100 * math.log(11)),
]


@pytest.mark.parametrize(
    ("name", "builder", "now", "want"),
    WEIGHT_CASES,
    ids=[case[0] for case in WEIGHT_CASES],
)
def test_effective_weight(name: str, builder, now: float, want: float) -> None:  # type: ignore[no-untyped-def]
    view = builder.view(cluster().group("n").build())
    assert effective_weight(view, PolicyConfig(), now) == pytest.approx(want)


def test_effective_weight_only_defends() -> None:
    """A pending normal job never preempts a fresh normal job, however long it waited."""
    nodes = cluster().group("n").build()
    snap = snapshot(
        nodes,
        jobs=[job("v").gpus(8).running(since=NOW).on("n-0"), job("P").gpus(8).submitted(0)],
        now=NOW,
    )
    assert run(snap, CALDERA).evictions == ()


# -- debug never preempts, whatever its priority ---------------------------------------------


@pytest.mark.parametrize(
    ("policy", "want_evicted"),
    [(PreemptionPolicy.NEVER, {}), (PreemptionPolicy.PREEMPT_LOWER, {"v": ("preempt", "d", ())})],
    ids=["policy Never: no eviction", "control: the same job with PreemptLowerPriority evicts"],
)
def test_debug_policy_never_is_what_stops_it(
    monkeypatch: pytest.MonkeyPatch, policy: PreemptionPolicy, want_evicted: dict[str, object]
) -> None:
    # Lift debug above normal so priority alone would let it preempt a normal job; only the
    # preemption policy stands in the way.
    monkeypatch.setitem(PRIORITY_CLASSES, JobType.DEBUG, PriorityClass("debug-job", 500, policy))
    nodes = cluster().group("n").build()
    snap = snapshot(
        nodes,
        jobs=[
            job("v").gpus(8).running(since=NOW).on("n-0"),
            job("d").debug().gpus(8).submitted(NOW),
        ],
        now=NOW,
    )
    assert decided_evictions(run(snap, CALDERA)) == want_evicted


# -- budget: one unit bigger than the budget goes alone ---------------------------------------


def test_a_victim_gang_larger_than_the_budget_goes_alone() -> None:
    """32 GPUs → budget 9.6. The 2×8 gang (16) cannot be split, so it goes as the cycle's only
    unit (see docs/bugs.md, Q1); the budget is then spent and P2 waits for the next cycle."""
    nodes = cluster().group("n", count=4).build()
    snap = snapshot(
        nodes,
        jobs=[
            job("g").gang(2, gpus=8).running(since=NOW).on_each("n-0", "n-1"),
            job("v").gpus(8).running(since=NOW).on("n-2"),
            job("x").gpus(8).protected().running().on("n-3"),
            job("P1").large().gang(2, gpus=8).submitted(NOW),
            job("P2").large().gpus(8).submitted(NOW + 1),
        ],
        now=NOW + 1,
    )
    decisions = run(snap, CALDERA)
    assert decided_evictions(decisions) == {"g": ("preempt", "P1", ())}
    pending = {n.job: n.nomination.pending_victims for n in decisions.nominations if n.nomination}
    assert pending == {"P1": ()}


# -- admission (the platform layer) -----------------------------------------------------------


ADMISSION_CASES = [
    ("open queue: pending", job("j"), [queue("q")], False, 0, JobState.PENDING, ""),
    (
        "unknown queue",
        job("j").queue("nope"),
        [queue("q")],
        False,
        0,
        JobState.REJECTED,
        "unknown queue 'nope'",
    ),
    ("closed queue", job("j"), [queue("q").closed()], False, 0, JobState.REJECTED, "Closed"),
    (
        "closing queue takes no new work",
        job("j"),
        [queue("q").closing()],
        False,
        0,
        JobState.REJECTED,
        "Closing",
    ),
    (
        "over capability",
        job("j").gang(3, gpus=8),
        [queue("q").capability(gpu=16)],
        False,
        0,
        JobState.REJECTED,
        "capability",
    ),
    (
        "no node could ever host it",
        job("j").gang(3, gpus=8),
        [queue("q")],
        False,
        0,
        JobState.REJECTED,
        "no node",
    ),
    (
        "throttled queue holds a normal job",
        job("j"),
        [queue("q")],
        True,
        0,
        JobState.HELD,
        "throttle",
    ),
    (
        "throttled queue still admits a large job",
        job("j").large(),
        [queue("q")],
        True,
        0,
        JobState.PENDING,
        "",
    ),
    (
        "throttled queue still admits a critical job",
        job("j").critical(),
        [queue("q")],
        True,
        0,
        JobState.PENDING,
        "",
    ),
    # t = 0 is Monday 00:00; window Mon-Fri 9-18
    (
        "outside the window: held",
        job("j"),
        [queue("q").window(range(1, 6), 9, 18)],
        False,
        0,
        JobState.HELD,
        "window",
    ),
    (
        "inside the window: pending",
        job("j"),
        [queue("q").window(range(1, 6), 9, 18)],
        False,
        10 * HOUR,
        JobState.PENDING,
        "",
    ),
    (
        "saturday: held",
        job("j"),
        [queue("q").window(range(1, 6), 9, 18)],
        False,
        5 * 24 * HOUR + 10 * HOUR,
        JobState.HELD,
        "window",
    ),
]


@pytest.mark.parametrize(
    ("name", "builder", "queues", "throttled", "now", "want_state", "want_reason"),
    ADMISSION_CASES,
    ids=[case[0] for case in ADMISSION_CASES],
)
def test_admission(  # type: ignore[no-untyped-def]
    name, builder, queues, throttled, now, want_state, want_reason
) -> None:
    spec = builder.queue(builder.queue_name if builder.queue_name != "default" else "q").build()
    by_name = {q.name: q.build() for q in queues}
    throttles = {"q": Throttle("q", "big", 0.0)} if throttled else {}
    nodes = cluster().group("n", count=2).build()  # 16 GPUs: a 3×8 gang can never fit
    admission = admit(spec, by_name, throttles, now, nodes)
    assert admission.state is want_state
    assert want_reason in admission.reason


def test_admission_refuses_critical_where_the_queue_does_not_allow_it() -> None:
    """DESIGN §2: who may submit critical is a queue/role permission (Queue.critical_allowed)."""
    queues = {"q": queue("q").critical_allowed(False).build()}
    nodes = cluster().group("n").build()
    admission = admit(job("c").critical().queue("q").build(), queues, {}, 0.0, nodes)
    assert admission.state is JobState.REJECTED
    # the same queue still takes other types
    assert admit(job("n").queue("q").build(), queues, {}, 0.0, nodes).state is JobState.PENDING


# -- enqueue ---------------------------------------------------------------------------------


def test_closed_queue_pending_jobs_wait_and_running_jobs_continue() -> None:
    nodes = cluster().group("n", count=2).build()
    snap = snapshot(
        nodes,
        queues=[queue("q").closed()],
        jobs=[job("r").queue("q").gpus(8).running().on("n-0"), job("p").queue("q").gpus(8)],
        now=60,
    )
    decisions = run(snap, CALDERA)
    assert decisions.starts == () and decisions.evictions == ()


def test_window_holds_pending_and_releases_held() -> None:
    nodes = cluster().group("n", count=2).build()
    night = queue("night").window(range(1, 8), 22, 6)  # every night, wrapping past midnight
    day = 12 * HOUR
    snap = snapshot(
        nodes,
        queues=[night],
        jobs=[job("p").queue("night").gpus(8), job("h").queue("night").gpus(8).held("window")],
        now=day,
    )
    decisions = run(snap, CALDERA)
    assert decisions.holds == (Hold("p", "window"),) and decisions.starts == ()
    assert decisions.wakeup == 22 * HOUR  # the window opens at 22:00
    snap = snapshot(
        nodes, queues=[night], jobs=[job("h").queue("night").held("window")], now=23 * HOUR
    )
    assert run(snap, CALDERA).releases == (Release("h", "window"),)


def test_capability_caps_a_queue() -> None:
    nodes = cluster().group("n", count=3).build()
    snap = snapshot(
        nodes,
        queues=[queue("q").capability(gpu=16)],
        jobs=[
            job("r").queue("q").gpus(8).running().on("n-0"),
            job("a").queue("q").gpus(8).submitted(1),
            job("b").queue("q").gpus(8).submitted(2),
        ],
    )
    # 8 running + 8 for `a` = 16 = the cap; `b` would make 24
    assert set(decided_starts(snap, run(snap, CALDERA))) == {"a"}


def test_elastic_tasks_stop_at_capability() -> None:
    nodes = cluster().group("n", count=2).build()
    snap = snapshot(
        nodes,
        queues=[queue("q").capability(gpu=12)],
        jobs=[job("e").queue("q").gang(4, gpus=4, min_available=1)],
    )
    # room for all four 4-GPU tasks, but 12 GPUs of capability: at most three, at least the
    # gang's minimum of one (the cycle may keep only the minimum and grow it later)
    tasks = len(decided_starts(snap, run(snap, CALDERA))["e"])
    assert tasks >= 1 and tasks * 4 <= 12


def test_elastic_extras_wait_for_every_queues_minimum() -> None:
    """Issue 11, bug 4: allocate starts a gang at `min_available`; its extra tasks grow in
    backfill, after the other queue's pending job had its turn. One node of 4 GPUs, queues
    q1 and q2 alike: `wide` (q1, 4 × 1, min 1) and `early` (q2, 1 GPU) both start, and wide
    grows into the 2 GPUs left over — one start decision per job."""
    nodes = cluster().group("n", gpus=4).build()
    snap = snapshot(
        nodes,
        queues=[queue("q1"), queue("q2")],
        jobs=[
            job("wide").queue("q1").gang(4, gpus=1, min_available=1).submitted(0),
            job("early").queue("q2").gpus(1).submitted(0),
        ],
    )
    decisions = run(snap, CALDERA)
    starts = decided_starts(snap, decisions)
    assert (len(starts["wide"]), len(starts["early"])) == (3, 1)
    assert [s.job for s in decisions.starts].count("wide") == 1


# -- allocate order ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rich_deserved", "poor_deserved", "want"),
    [(8, 16, "p1"), (16, 8, "r1")],
    ids=["poor at 50 % goes before rich at 100 %", "swapped shares swap the winner"],
)
def test_queue_with_the_lowest_share_goes_first(
    rich_deserved: int, poor_deserved: int, want: str
) -> None:
    """One free node, one 8-GPU job in each queue, each queue holding 8 GPUs: the queue with
    the lower allocated / deserved goes first, whatever the submit times."""
    nodes = cluster().group("n", count=3).build()
    snap = snapshot(
        nodes,
        queues=[
            queue("rich").deserved(gpu=rich_deserved),
            queue("poor").deserved(gpu=poor_deserved),
        ],
        jobs=[
            job("r0").queue("rich").gpus(8).running().on("n-0"),
            job("p0").queue("poor").gpus(8).running().on("n-1"),
            job("r1").queue("rich").gpus(8).submitted(0),
            job("p1").queue("poor").gpus(8).submitted(5),
        ],
    )
    assert list(decided_starts(snap, run(snap, CALDERA))) == [want]


def test_jobs_in_a_queue_by_priority_then_submit_time() -> None:
    nodes = cluster().group("n").build()
    snap = snapshot(
        nodes,
        jobs=[
            job("early-debug").debug().gpus(4).submitted(0),
            job("late-normal").gpus(4).submitted(50),
            job("early-normal").gpus(4).submitted(10),
        ],
    )
    # room for two of the three 4-GPU jobs: both normals, the earlier first; debug waits
    assert list(decided_starts(snap, run(snap, CALDERA))) == ["early-normal", "late-normal"]


def test_critical_goes_first_whatever_its_queue_share() -> None:
    nodes = cluster().group("n", count=2).build()
    snap = snapshot(
        nodes,
        queues=[queue("ops").deserved(gpu=1), queue("team").deserved(gpu=16)],
        jobs=[
            job("busy").queue("ops").gpus(8).running().on("n-0"),  # ops is at 800 % share
            job("c").critical().queue("ops").gpus(8).submitted(5),
            job("n").queue("team").gpus(8).submitted(0),
        ],
    )
    assert list(decided_starts(snap, run(snap, CALDERA))) == ["c"]


# -- throttle (§4.4) ------------------------------------------------------------------------


def test_throttle_turns_on_when_a_large_job_cannot_be_placed() -> None:
    nodes = cluster().group("n", count=2).build()
    snap = snapshot(
        nodes,
        jobs=[
            job("v").gpus(8).protected().running().on("n-0"),
            job("w").gpus(8).protected().running().on("n-1"),
            job("big").large().gang(2, gpus=8).queue("q").submitted(NOW),
        ],
        queues=[queue("q"), queue("default")],
        now=NOW,
    )
    decisions = run(snap, CALDERA)
    assert decisions.throttles == (ThrottleOn("q", "big"),)
    assert decisions.wakeup == NOW + 300  # the 300 s timeout


def test_throttle_turns_on_only_once_per_large_job() -> None:
    nodes = cluster().group("n").build()
    snap = snapshot(
        nodes,
        jobs=[
            job("v").gpus(8).protected().running().on("n-0"),
            job("big").large().gpus(8).throttled_once().submitted(NOW),
        ],
        now=NOW,
    )
    assert run(snap, CALDERA).throttles == ()


THROTTLE_END_CASES = [
    ("timeout", NOW + 300, "pending", "timeout"),
    ("the large job runs", NOW + 10, "running", "started"),
    ("still waiting", NOW + 10, "pending", None),
]


@pytest.mark.parametrize(
    ("name", "now", "big_state", "want_off"),
    THROTTLE_END_CASES,
    ids=[case[0] for case in THROTTLE_END_CASES],
)
def test_throttle_ends_and_releases_held_jobs_in_submission_order(
    name: str, now: float, big_state: str, want_off: str | None
) -> None:
    nodes = cluster().group("n", count=2).build()
    big = job("big").large().gpus(8).submitted(NOW).throttled_once()
    other = job("x").gpus(8).protected().running()
    if big_state == "running":
        big = big.running(since=NOW + 5).on("n-1")
    else:
        other = other.on("n-1")  # no room: `big` keeps waiting
    snap = snapshot(
        nodes,
        jobs=[
            job("v").gpus(8).protected().running().on("n-0"),
            *([other] if big_state != "running" else []),
            big,
            job("h2").gpus(8).submitted(NOW + 2).held("throttle"),
            job("h1").gpus(8).submitted(NOW + 1).held("throttle"),
        ],
        throttles=[Throttle("default", "big", NOW)],
        now=now,
    )
    decisions = run(snap, CALDERA)
    if want_off is None:
        assert decisions.throttles == () and decisions.releases == ()
    else:
        assert decisions.throttles == (ThrottleOff("default", want_off),)
        assert decisions.releases == (Release("h1", "throttle"), Release("h2", "throttle"))


# -- reservations (§4.3, §4.4) --------------------------------------------------------------


def test_room_reserved_for_a_preemptor_is_not_given_to_others() -> None:
    """`big` waits for its victim on n-0 (still releasing); n-0's free half is blocked."""
    nodes = cluster().group("n", count=2).build()
    reserved = (TaskPlacement(0, tuple(range(8)), 1000),)
    snap = snapshot(
        nodes,
        jobs=[
            job("victim").gpus(4).running(since=0).on("n-0", devices=(0, 1, 2, 3)),
            job("x").gpus(8).protected().running().on("n-1"),
            job("big")
            .large()
            .gpus(8)
            .submitted(NOW)
            .nominated(
                Nomination(reserved, ("victim",), (PendingVictim("victim"),), NOW, "preempt")
            ),
            job("small").gpus(4).submitted(NOW + 1),
        ],
        now=NOW + 2,
    )
    decisions = run(snap, CALDERA)
    assert decided_starts(snap, decisions) == {}


@pytest.mark.parametrize(
    ("lender_gpus", "signalled"),
    [
        (12, True),  # the lender still holds 12 > 8 deserved: its pending victim goes
        (8, False),  # a job of it finished since the plan: at its deserved share, it keeps v
    ],
)
def test_a_pending_reclaim_victim_goes_only_while_its_queue_lends(
    lender_gpus: int, signalled: bool
) -> None:
    """Reclaim's floor holds when a plan's pending victim is signalled, not only when the
    plan was made (DESIGN §4.1 step 1, docs/bugs.md B17): a queue at its deserved share
    lends nothing, so the plan is given up and made afresh later."""
    nodes = cluster().group("n", count=3).build()
    reserved = (TaskPlacement(0, tuple(range(8)), 1000),)
    jobs = [
        job("v").queue("lender").gpus(8).running(since=0).on("n-0"),
        job("x").gpus(8).protected().running().on("n-2"),
        job("p")
        .critical()
        .queue("team")
        .gpus(8)
        .submitted(NOW)
        .nominated(Nomination(reserved, ("v",), (PendingVictim("v"),), NOW, "reclaim")),
    ]
    if lender_gpus > 8:
        jobs.append(job("w").queue("lender").gpus(lender_gpus - 8).running(since=0).on("n-1"))
    assert_pending_victim_v_goes(nodes, jobs, signalled)


@pytest.mark.parametrize(
    ("since_plan", "preemptor", "signalled"),
    [
        (0, "large", True),  # team holds only p's 8 promised GPUs: within its 8 deserved
        (2, "large", False),  # a critical job of team started since: 10 > 8, p re-plans
        (2, "critical", True),  # a critical preemptor asks no share (only its capability)
    ],
)
def test_a_pending_reclaim_victim_goes_only_while_the_reclaimers_queue_is_within_its_share(
    since_plan: int, preemptor: str, signalled: bool
) -> None:
    """Reclaim's own condition holds when a plan's pending victim is signalled, not only when
    the plan was made (DESIGN §4.1, docs/bugs.md B18): work that started in the reclaimer's
    queue since — a critical job, which asks no share — can leave it over its deserved share,
    and then nothing more is reclaimed for it; the plan is given up and made afresh later."""
    nodes = cluster().group("n", count=3).build()
    reserved = (TaskPlacement(0, tuple(range(8)), 1000),)
    p = job("p").queue("team").gpus(8).submitted(NOW)
    p = p.critical() if preemptor == "critical" else p.large()
    jobs = [
        job("v").queue("lender").gpus(8).running(since=0).on("n-0"),
        job("w").queue("lender").gpus(8).running(since=0).on("n-1"),
        p.nominated(Nomination(reserved, ("v",), (PendingVictim("v"),), NOW, "reclaim")),
    ]
    if since_plan:
        jobs.append(job("c").critical().queue("team").gpus(since_plan).running().on("n-2"))
    assert_pending_victim_v_goes(nodes, jobs, signalled)


def assert_pending_victim_v_goes(
    nodes: Sequence[Node], jobs: Sequence[JobBuilder], signalled: bool
) -> None:
    """One cycle with "lender" and "team" (8 deserved GPUs each), a second after p's plan was
    made: is its pending victim v signalled, or is the plan given up instead?"""
    snap = snapshot(
        nodes,
        queues=[queue("lender").deserved(gpu=8).reclaimable(), queue("team").deserved(gpu=8)],
        jobs=jobs,
        now=NOW + 1,
    )
    decisions = run(snap, CALDERA)
    assert ("v" in decided_evictions(decisions)) is signalled
    assert any(n.job == "p" and n.nomination is None for n in decisions.nominations) is not (
        signalled
    )
    assert violations(snap, decisions) == []


def test_a_nominated_preemptor_starts_on_its_room_when_free() -> None:
    nodes = cluster().group("n", count=2).build()
    reserved = (TaskPlacement(1, tuple(range(8)), 1000),)
    snap = snapshot(
        nodes,
        jobs=[
            job("x").gpus(8).protected().running().on("n-0"),
            job("big")
            .large()
            .gpus(8)
            .submitted(NOW)
            .nominated(Nomination(reserved, ("victim",), (), NOW, "preempt")),
        ],
        now=NOW + 120,
    )
    decisions = run(snap, CALDERA)
    assert decided_starts(snap, decisions) == {"big": (("n-1", tuple(range(8)), 1000),)}


def test_a_nominated_preemptor_placed_elsewhere_starts_its_gang_at_its_minimum() -> None:
    """Its promised room (n-0) is still held, n-1 is free: it starts there with its gang's
    `min_available` tasks — all that was promised against its queue's capability — and
    backfill grows it only as far as the cap allows (3 × 2 GPUs would break the cap of 4)."""
    nodes = cluster().group("n", count=2).build()
    reserved = (TaskPlacement(0, (0, 1), 1000),)
    snap = snapshot(
        nodes,
        queues=[queue("team").capability(gpu=4)],
        jobs=[
            job("x").gpus(8).protected().running().on("n-0"),
            job("elastic")
            .critical()
            .queue("team")
            .gang(3, gpus=2, min_available=1)
            .submitted(NOW)
            .nominated(Nomination(reserved, ("victim",), (), NOW, "preempt")),
        ],
        now=NOW + 120,
    )
    decisions = run(snap, CALDERA)
    starts = decided_starts(snap, decisions)
    assert [node for node, _, _ in starts["elastic"]] == ["n-1", "n-1"]
    assert violations(snap, decisions) == []


# -- lifecycle ------------------------------------------------------------------------------


def test_lifecycle_transitions() -> None:
    assert check_transition(JobState.PENDING, JobState.RUNNING) is JobState.RUNNING
    assert check_transition(JobState.RELEASING, JobState.PENDING) is JobState.PENDING
    for terminal in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED):
        assert TRANSITIONS[terminal] == frozenset()
        with pytest.raises(IllegalTransition):
            check_transition(terminal, JobState.PENDING)
    with pytest.raises(IllegalTransition):
        check_transition(JobState.HELD, JobState.RUNNING)  # held jobs are released first
    with pytest.raises(IllegalTransition):
        check_transition(JobState.PENDING, JobState.RELEASING)
