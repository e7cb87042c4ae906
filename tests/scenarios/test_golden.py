"""Golden scenarios (issue 3 and the seeds): each YAML beside this file runs through
`caldera.sim.simulate`; its header comment derives every bound asserted here.

Every result must also validate against ../shared/schemas/simulate-output.schema.json and keep
the §3/§5 invariants (`critical_preempted == 0`, `gang_hang_gpu_hours == 0`).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from caldera.errors import ScenarioError
from caldera.sim import load_scenario, parse_scenario, simulate

HERE = Path(__file__).resolve().parent
SCENARIOS = sorted(p.name for p in HERE.glob("*.yaml"))


@functools.cache
def result(name: str) -> dict[str, Any]:
    return simulate(load_scenario(HERE / name))


def events(name: str, kind: str, job: str | None = None) -> list[dict[str, Any]]:
    return [
        e for e in result(name)["events"] if e["kind"] == kind and (job is None or e["job"] == job)
    ]


def job(name: str, job_name: str) -> dict[str, Any]:
    return next(j for j in result(name)["jobs"] if j["name"] == job_name)


def test_there_are_golden_scenarios() -> None:
    assert len(SCENARIOS) >= 7


@pytest.mark.parametrize("name", SCENARIOS)
def test_schema_and_invariants(name: str, shared: Path) -> None:
    schema = json.loads((shared / "schemas" / "simulate-output.schema.json").read_text())
    document = result(name)
    jsonschema.validate(document, schema)
    assert document["metrics"]["critical_preempted"] == 0
    assert document["metrics"]["gang_hang_gpu_hours"] == 0
    # no critical, protected or kube-system job ever evicted
    scenario = load_scenario(HERE / name)
    specs = {s.spec.name: s.spec for s in scenario.submissions}
    for evict in events(name, "evict"):
        spec = specs[evict["job"]]
        assert spec.priority < 1000 and not spec.protected and not spec.conformance_protected


# -- a 4×8 large job against a stream of one-node jobs --------------------------------------

STREAM = "large-vs-stream.yaml"


def test_large_job_starts_within_ten_minutes() -> None:
    big = job(STREAM, "big")
    assert big["start"] is not None
    assert big["start"] - big["submit"] <= 600
    assert result(STREAM)["metrics"]["large_job_max_wait"] <= 600


def test_large_job_throttles_its_queue_while_it_waits() -> None:
    (on,) = events(STREAM, "throttle_on")
    assert (on["queue"], on["large_job"], on["t"]) == ("team", "big", 3600.0)
    assert result(STREAM)["metrics"]["throttle_episodes"] == 1
    held = [e["job"] for e in events(STREAM, "hold") if e.get("reason") == "throttle"]
    released = [e["job"] for e in events(STREAM, "release") if e.get("reason") == "throttle"]
    assert held, "a stream job submitted while big waited must be held"
    assert released == held  # released in submission order once big runs
    big_start = job(STREAM, "big")["start"]
    assert all(e["t"] == big_start for e in events(STREAM, "release"))
    (off,) = events(STREAM, "throttle_off")
    assert (off["reason"], off["t"]) == ("started", big_start)


def test_large_job_takes_at_most_four_victims_in_one_domain() -> None:
    victims = [e for e in events(STREAM, "evict") if e["preemptor"] == "big"]
    assert 1 <= len(victims) <= 4
    assert len(events(STREAM, "evict")) == len(victims)  # nobody else was evicted
    (start,) = events(STREAM, "start", "big")
    scenario = load_scenario(HERE / STREAM)
    tier1 = {n.name: n.tier1 for n in scenario.nodes}
    assert len({tier1[node] for node in start["placement"]}) == 1
    assert start["gpus"] == 32
    # the victims were exactly on the nodes big now uses
    assert {e["job"] for e in victims} == {
        s["job"]
        for s in events(STREAM, "start")
        if s["t"] < 3600 and set(s["placement"]) <= set(start["placement"])
    }


# -- critical arrivals on a full cluster ----------------------------------------------------

CRITICAL = "critical-arrivals.yaml"


def test_every_critical_arrival_starts_within_a_minute_and_is_never_evicted() -> None:
    critical = [j for j in result(CRITICAL)["jobs"] if j["type"] == "critical"]
    assert len(critical) == 4
    for record in critical:
        assert record["start"] is not None and record["start"] - record["submit"] <= 60, record
        assert record["evictions"] == 0
        assert record["state"] == "Running"  # still running at `until`: nobody took them
    assert result(CRITICAL)["metrics"]["sla_attainment"]["critical"] == 1.0
    # the cluster really was full: each arrival had to evict something (a large job they
    # evicted may itself take lower-priority room back when it resumes)
    preemptors = {e["preemptor"] for e in events(CRITICAL, "evict")}
    assert {"c1", "c2", "c3", "c4"} <= preemptors <= {"c1", "c2", "c3", "c4", "train"}


# -- a nearly finished job is defended --------------------------------------------------------

NEARLY = "nearly-done.yaml"


def test_nearly_done_job_is_not_taken_while_a_fresh_job_is_available() -> None:
    evicted = [(e["job"], e["preemptor"]) for e in events(NEARLY, "evict")]
    assert evicted == [("fresh", "big1")]
    old = job(NEARLY, "old")
    assert (old["evictions"], old["end"], old["state"]) == (0, 40000.0, "Succeeded")


def test_nearly_done_job_is_not_taken_by_a_large_job_at_all() -> None:
    # big2 has nobody left to take but `old`, which W_eff defends: it waits for old's end
    assert job(NEARLY, "big2")["start"] == 40000.0
    assert not [e for e in events(NEARLY, "evict") if e["preemptor"] == "big2"]


# -- reclaim ---------------------------------------------------------------------------------

RECLAIM = "reclaim.yaml"


def _held_after_each_reclaim(name: str, queue: str) -> list[float]:
    """GPUs the queue still holds (not counting what is leaving) after each reclaim from it."""
    specs = {s.spec.name: s.spec for s in load_scenario(HERE / name).submissions}
    held = 0.0
    after: list[float] = []
    for e in result(name)["events"]:
        spec = specs.get(e["job"] or "")
        if spec is None or spec.queue != queue:
            continue
        if e["kind"] == "start":
            held += e["gpus"]
        elif e["kind"] == "finish":
            held -= spec.gpu * spec.tasks / 1000
        elif e["kind"] == "evict":
            held -= e["gpus"]
            if e["reason"] == "reclaim":
                after.append(held)
    return after


def test_reclaim_takes_only_from_the_reclaimable_borrower_and_only_what_is_needed() -> None:
    reclaims = [e for e in events(RECLAIM, "evict") if e["reason"] == "reclaim"]
    assert {e["preemptor"] for e in reclaims} == {"train"}
    assert all(e["job"].startswith("lab-") for e in reclaims)
    assert sum(e["gpus"] for e in reclaims) == 16  # train needs 2 × 8
    assert not [e for e in events(RECLAIM, "evict") if e["job"].startswith("ops-")]
    assert job(RECLAIM, "train")["start"] == 600.0


def test_reclaim_never_takes_a_queue_below_its_deserved_share() -> None:
    # lab deserves 16 GPUs; it held 32 when train came
    assert _held_after_each_reclaim(RECLAIM, "lab") == [24.0, 16.0]


def test_no_borrower_left_means_no_reclaim() -> None:
    assert not [e for e in events(RECLAIM, "evict") if e["preemptor"] == "train2"]
    assert job(RECLAIM, "train2")["start"] == job(RECLAIM, "train")["end"] == 4200.0


# -- no feasible victim set -------------------------------------------------------------------

INFEASIBLE = "no-feasible-victims.yaml"


def test_a_large_job_no_victim_set_can_place_evicts_nothing() -> None:
    assert events(INFEASIBLE, "evict") == []
    assert result(INFEASIBLE)["metrics"]["preemptions"]["total"] == 0
    for name in ("wide", "huge"):
        record = job(INFEASIBLE, name)
        assert record["start"] is None and record["state"] in ("Pending", "Rejected")
    for name in ("keep0", "w1", "keep2", "w3"):
        assert job(INFEASIBLE, name)["state"] == "Running"


# -- rejects ---------------------------------------------------------------------------------

REJECTS = "rejects.yaml"


@pytest.mark.parametrize(
    ("job_name", "reason_fragment"),
    [
        ("to-closed", "archive"),
        ("to-nowhere", "nope"),
        ("too-few", "min_available"),
        ("shared-gang", "tasks: 1"),
        ("urgent", "critical"),
    ],
    ids=[
        "closed queue",
        "unknown queue",
        "invalid gang size",
        "shared GPU in a gang",
        "critical where the queue does not allow it",
    ],
)
def test_refused_submissions_get_a_reject_event(job_name: str, reason_fragment: str) -> None:
    (reject,) = events(REJECTS, "reject", job_name)
    assert reason_fragment in reject["reason"]
    record = job(REJECTS, job_name)
    assert (record["state"], record["start"]) == ("Rejected", None)
    assert not events(REJECTS, "start", job_name)


def test_accepted_work_runs_beside_the_rejects() -> None:
    assert job(REJECTS, "ok")["state"] == "Succeeded"


# -- time windows ----------------------------------------------------------------------------

WINDOWS = "windows.yaml"
DAY = 86_400


@pytest.mark.parametrize(
    ("job_name", "want_start", "want_end"),
    [
        ("early", 9 * 3600, 10 * 3600),
        ("anytime", 0, 600),
        ("weekend", 7 * DAY + 9 * 3600, 7 * DAY + 9 * 3600 + 600),
    ],
    ids=["held until monday 09:00", "queue without a window", "held over the weekend"],
)
def test_time_windows_hold_and_release(job_name: str, want_start: float, want_end: float) -> None:
    record = job(WINDOWS, job_name)
    assert (record["start"], record["end"]) == (want_start, want_end)
    if job_name != "anytime":
        holds = [e["t"] for e in events(WINDOWS, "hold", job_name)]
        releases = [e["t"] for e in events(WINDOWS, "release", job_name)]
        assert holds == [record["submit"]] and releases == [want_start]


def test_a_running_job_leaves_when_its_window_closes_and_resumes_next_day() -> None:
    (evict,) = events(WINDOWS, "evict", "late")
    assert (evict["t"], evict["reason"], evict["preemptor"]) == (18 * 3600, "window", None)
    assert [e["t"] for e in events(WINDOWS, "start", "late")] == [17 * 3600, DAY + 9 * 3600]
    # 1 h done before 18:00 is kept (checkpoint on SIGTERM): 1 h more on Tuesday
    assert job(WINDOWS, "late")["end"] == DAY + 10 * 3600


@pytest.mark.parametrize("name", [REJECTS, NEARLY])
def test_the_cli_prints_the_same_document(name: str) -> None:
    """Held-out scenarios are run through `caldera simulate FILE --json`: it must print exactly
    what the library returns, as one JSON document."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("caldera")), "simulate", str(HERE / name), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == result(name)


def test_a_json_scenario_runs_like_its_yaml(tmp_path: Path) -> None:
    """DESIGN §6: a scenario is one YAML or JSON file."""
    import yaml

    path = tmp_path / "rejects.json"
    path.write_text(json.dumps(yaml.safe_load((HERE / REJECTS).read_text())), encoding="utf-8")
    document = simulate(load_scenario(path))
    assert document["jobs"] == result(REJECTS)["jobs"]
    assert document["events"] == result(REJECTS)["events"]


# -- issue 11: bugs found by peer test cases ------------------------------------------------

CAPPED = "capability-preempt.yaml"


def _held_by_queue_over_time(name: str, queue: str) -> list[tuple[float, float]]:
    """(time, GPUs the queue holds — running and releasing) after each start, release or end."""
    specs = {s.spec.name: s.spec for s in load_scenario(HERE / name).submissions}
    running: dict[str, float] = {}
    leaving: list[tuple[float, float]] = []  # (released_at, GPUs)
    seen: list[tuple[float, float]] = []
    for e in result(name)["events"]:
        spec = specs.get(e["job"] or "")
        if spec is None or spec.queue != queue:
            continue
        leaving = [(at, gpus) for at, gpus in leaving if at > e["t"]]
        if e["kind"] == "start":
            running[e["job"]] = running.get(e["job"], 0.0) + e["gpus"]
        elif e["kind"] == "evict":
            running[e["job"]] -= e["gpus"]
            leaving.append((e["released_at"], e["gpus"]))
        elif e["kind"] in ("finish", "fail", "cancel"):
            running.pop(e["job"], None)
        seen.append((e["t"], sum(running.values()) + sum(g for _, g in leaving)))
    return seen


def test_a_job_capped_by_its_own_queue_preempts_inside_it() -> None:
    evictions = [(e["job"], e["reason"], e["preemptor"], e["t"]) for e in events(CAPPED, "evict")]
    assert evictions == [("low2", "preempt", "urgent", 60.0)]
    assert job(CAPPED, "urgent")["start"] == 60.0
    assert result(CAPPED)["metrics"]["sla_attainment"]["critical"] == 1.0
    assert all(held <= 4 for _, held in _held_by_queue_over_time(CAPPED, "team"))


ONE_TASK = "elastic-one-task.yaml"
ONE_TASK_RECLAIM = "elastic-one-task-reclaim.yaml"


@pytest.mark.parametrize(
    ("name", "reason"),
    [(ONE_TASK, "preempt"), (ONE_TASK_RECLAIM, "reclaim")],
    ids=["preempt", "reclaim"],
)
def test_extra_elastic_tasks_go_one_at_a_time(name: str, reason: str) -> None:
    (evict,) = events(name, "evict")
    assert (evict["job"], evict["gpus"], evict["tasks"]) == ("elastic", 1, 1)
    assert (evict["reason"], evict["preemptor"], evict["t"]) == (reason, "big", 60.0)
    assert job(name, "big")["start"] == 60.0
    assert job(name, "elastic")["state"] == "Running"
    # the node stays full while big runs: elastic never grows back into big's GPU
    assert [e["t"] for e in events(name, "start", "elastic")] == [0.0]


ZERO = "deserved-zero.yaml"


def test_an_explicit_zero_deserved_share_is_reclaimed() -> None:
    evictions = [(e["job"], e["reason"], e["preemptor"], e["t"]) for e in events(ZERO, "evict")]
    assert evictions == [("borrower", "reclaim", "owner", 60.0)]
    assert job(ZERO, "owner")["start"] == 60.0


EXTRAS = "elastic-extras-yield.yaml"


def test_elastic_extras_never_keep_another_queue_below_its_share() -> None:
    assert job(EXTRAS, "early")["start"] == 0.0
    starts = [(e["t"], e["tasks"], e.get("grow", False)) for e in events(EXTRAS, "start", "wide")]
    # the gang at its minimum in allocate, then its extras in backfill: 3 tasks at t = 0
    assert sum(tasks for t, tasks, _ in starts if t == 0.0) == 3
    assert all(t == 0.0 for t, _, _ in starts)
    (evict,) = events(EXTRAS, "evict")
    assert (evict["job"], evict["tasks"], evict["reason"], evict["preemptor"]) == (
        "wide",
        1,
        "reclaim",
        "late",
    )
    assert job(EXTRAS, "late")["start"] == 600.0


PING_PONG = "no-ping-pong.yaml"


def test_equal_priority_borrowers_are_reclaimed_once_and_never_take_it_back() -> None:
    evictions = [
        (e["job"], e["reason"], e["preemptor"], e["t"]) for e in events(PING_PONG, "evict")
    ]
    assert evictions == [("a1", "reclaim", "b0", 600.0)]
    assert job(PING_PONG, "b0")["start"] == 600.0
    assert [e["t"] for e in events(PING_PONG, "start", "a1")] == [1.0, 36000.0]
    # while a1 waits (until a0 ends and hands it the room at 36000)
    held = _held_by_queue_over_time(PING_PONG, "a")
    assert all(gpus >= 8 for t, gpus in held if 1.0 <= t < 36000)


STARVING = "starving-large.yaml"


def test_a_starving_large_job_keeps_freed_room_against_equal_priority_competitors() -> None:
    assert job(STARVING, "big")["start"] == 5400.0  # when s1 ends, the later of the two
    assert events(STARVING, "evict") == []
    # the stream jobs submitted before it started wait for it, and start when it ends
    assert [job(STARVING, name)["start"] for name in ("w0", "w1")] == [12600.0, 12600.0]


# -- a borrower at the W_eff ceiling: waited for only while it ends inside the SLO (§4.1) ----

CEILING_OUTSIDE = "ceiling-borrower-outside-slo.yaml"
CEILING_INSIDE = "ceiling-borrower-inside-slo.yaml"
CEILING_OVERRUNS = "ceiling-borrower-overruns.yaml"


def _reclaimed(name: str) -> list[tuple[float, str]]:
    return [(e["t"], e["job"]) for e in events(name, "evict") if e["reason"] == "reclaim"]


def test_a_ceiling_borrower_that_ends_after_the_slo_is_reclaimed() -> None:
    taken = _reclaimed(CEILING_OUTSIDE)
    assert len(taken) == 7 and {t for t, _ in taken} <= {36000.0, 36001.0, 36002.0, 36003.0}
    assert all(e["preemptor"] == "big" for e in events(CEILING_OUTSIDE, "evict"))
    big = job(CEILING_OUTSIDE, "big")
    assert big["start"] == 36063.0
    assert big["start"] - big["submit"] <= 3600  # within the large-job start SLO
    assert result(CEILING_OUTSIDE)["metrics"]["sla_attainment"]["large-job"] == 1.0
    assert result(CEILING_OUTSIDE)["metrics"]["wasted_gpu_hours"] == 0
    assert all(j["state"] == "Succeeded" for j in result(CEILING_OUTSIDE)["jobs"])


def test_a_ceiling_borrower_that_ends_inside_the_slo_is_waited_for() -> None:
    assert events(CEILING_INSIDE, "evict") == []
    assert job(CEILING_INSIDE, "big")["start"] == 38000.0
    assert result(CEILING_INSIDE)["metrics"]["sla_attainment"]["large-job"] == 1.0


def test_a_ceiling_borrower_that_overruns_its_expected_end_is_reclaimed_when_the_slo_ends() -> None:
    taken = _reclaimed(CEILING_OVERRUNS)
    assert len(taken) == 7
    assert all(39600.0 <= t <= 39603.0 for t, _ in taken)
    assert job(CEILING_OVERRUNS, "big")["start"] == 39663.0
    assert result(CEILING_OVERRUNS)["metrics"]["wasted_gpu_hours"] == 0


# -- evictions timed to a victim's periodic checkpoint (§4.4) --------------------------------

TIMED = "checkpoint-timed-eviction.yaml"


def test_an_eviction_waits_for_the_victims_checkpoint_inside_the_slo() -> None:
    (first, second) = events(TIMED, "evict")
    assert (first["t"], first["job"], first["preemptor"]) == (3601.0, "v1", "big1")
    assert job(TIMED, "v1")["lost_gpu_seconds"] == 8.0  # the 1 s margin, not 1500 s
    assert job(TIMED, "big1")["start"] == 3721.0  # 421 s after its submission
    # a checkpoint past the slack is not waited for
    assert (second["t"], second["job"], second["preemptor"]) == (7000.0, "v2", "big2")
    assert job(TIMED, "v2")["lost_gpu_seconds"] == 7000.0 * 8
    assert result(TIMED)["metrics"]["sla_attainment"]["large-job"] == 1.0


ENDS_BY_ITSELF = "victim-ends-by-itself.yaml"


def _ends_by_itself(policy: dict[str, Any], work: float) -> dict[str, Any]:
    """victim-ends-by-itself.yaml with a `policy:` block and `v` needing `work` seconds."""
    data = yaml.safe_load((HERE / ENDS_BY_ITSELF).read_text())
    data["policy"] = policy
    for entry in data["jobs"]:
        if entry["name"] == "v":
            entry["duration"] = work
    return simulate(parse_scenario(data, HERE))


def test_a_victim_likely_to_end_inside_the_slack_is_waited_for() -> None:
    """Bounds derived in victim-ends-by-itself.yaml: `v` ends by itself, nothing lost."""
    assert events(ENDS_BY_ITSELF, "evict") == []
    assert job(ENDS_BY_ITSELF, "v")["end"] == 4000.0
    assert job(ENDS_BY_ITSELF, "v")["lost_gpu_seconds"] == 0.0
    assert job(ENDS_BY_ITSELF, "big")["start"] == 4001.0  # the next cycle, 1 s on
    assert result(ENDS_BY_ITSELF)["metrics"]["sla_attainment"]["large-job"] == 1.0


def test_without_timing_the_victim_is_evicted_at_once() -> None:
    off = _ends_by_itself({"checkpoint_wait": 0}, 3000.0)
    (evict,) = [e for e in off["events"] if e["kind"] == "evict"]
    assert (evict["t"], evict["job"], evict["preemptor"]) == (3000.0, "v", "big")
    lost = {j["name"]: j["lost_gpu_seconds"] for j in off["jobs"]}
    assert lost["v"] == 16_000.0
    assert next(j for j in off["jobs"] if j["name"] == "big")["start"] == 3120.0


def test_a_victim_that_outruns_its_estimate_is_evicted_at_the_last_moment() -> None:
    """The trade when the learned chance is wrong: more work lost, the SLO still kept."""
    late = _ends_by_itself({}, 4000.0)
    (evict,) = [e for e in late["events"] if e["kind"] == "evict"]
    assert (evict["t"], evict["job"], evict["preemptor"]) == (4620.0, "v", "big")
    by_name = {j["name"]: j for j in late["jobs"]}
    assert by_name["v"]["lost_gpu_seconds"] == 3620.0 * 8
    assert by_name["big"]["start"] == 4740.0


# -- planned start: backfill into a starving large job's reserved room (§4.4) ---------------

PLANNED = "planned-backfill.yaml"


def test_backfill_that_ends_before_the_planned_start_may_use_the_reserved_room() -> None:
    short = job(PLANNED, "short")
    assert (short["start"], short["end"]) == (1600.0, 3100.0)
    (start,) = events(PLANNED, "start", "short")
    assert start["placement"] == {"n-2": 8}  # the room reserved for big


def test_backfill_that_would_overrun_the_planned_start_is_kept_out() -> None:
    big = job(PLANNED, "big")
    assert big["start"] == 3600.0  # when p ends: the plan's time, delayed by nothing
    assert job(PLANNED, "long")["start"] >= big["start"]
    assert events(PLANNED, "evict") == []


def test_without_planned_backfill_the_reserved_room_stays_empty() -> None:
    """The default (`planned_backfill` off, config.py says why): short waits for big."""
    data = load_scenario(HERE / PLANNED)
    off = simulate(replace(data, config=replace(data.config, planned_backfill=False)))
    starts = {e["job"]: e["t"] for e in off["events"] if e["kind"] == "start"}
    assert starts["big"] == 3600.0
    assert starts["short"] >= 3600.0


DEPARTMENT_LENDS = "department-lends-and-takes-back.yaml"
SIBLINGS = "siblings-inside-department.yaml"
HOME_FIRST = "department-room-comes-home-first.yaml"


def test_a_department_takes_its_lent_room_back() -> None:
    """Bounds derived in department-lends-and-takes-back.yaml (DESIGN §2 "Hierarchy")."""
    name = DEPARTMENT_LENDS
    assert [job(name, f"v{i}")["start"] for i in range(4)] == [0.0, 1.0, 2.0, 3.0]
    by_web = [e for e in events(name, "evict") if e["preemptor"] == "web"]
    assert sorted(e["job"] for e in by_web) == ["v2", "v3"]
    assert all(e["reason"] == "reclaim" and e["t"] == 600.0 for e in by_web)
    assert job(name, "web")["start"] == 720.0
    (by_train,) = [e for e in events(name, "evict") if e["preemptor"] == "train"]
    assert (by_train["job"], by_train["reason"], by_train["t"]) == ("v1", "reclaim", 1200.0)
    assert job(name, "train")["start"] == 1320.0
    assert {e["job"] for e in events(name, "evict")} <= {"v0", "v1", "v2", "v3"}
    # research never below its deserved 8 after web's reclaim: v0 and v1 keep running
    assert not [e for e in events(name, "evict") if e["job"] in ("v0", "v1") and e["t"] < 1200]


def test_siblings_share_inside_a_department_at_its_share() -> None:
    """Bounds derived in siblings-inside-department.yaml: nlp takes back from its sibling
    vision, never from eng's serve (whose jobs would lose nothing)."""
    name = SIBLINGS
    (evict,) = events(name, "evict")
    assert (evict["job"], evict["reason"], evict["preemptor"], evict["t"]) == (
        "v1",
        "reclaim",
        "train",
        3600.0,
    )
    assert job(name, "train")["start"] == 3720.0
    assert job(name, "s0")["evictions"] == job(name, "s1")["evictions"] == 0
    assert job(name, "v0")["evictions"] == 0


def test_without_departments_the_same_teams_decide_otherwise() -> None:
    """The tree goldens with the departments removed (the teams a flat list with the same
    deserved shares): least lost work picks eng's serve job in the first and vision's
    lossless job in the third, and web, over its own 4, cannot reclaim at all — what the
    departments change, and not something else."""
    flat_evictions: dict[str, list[str]] = {}
    for name in (SIBLINGS, DEPARTMENT_LENDS, HOME_FIRST):
        data = yaml.safe_load((HERE / name).read_text())
        data["queues"] = [{k: v for k, v in q.items() if k != "parent"} for q in data["queues"]]
        data["queues"] = [q for q in data["queues"] if q["name"] not in ("research", "eng")]
        flat = simulate(parse_scenario(data, HERE))
        flat_evictions[name] = [e["job"] for e in flat["events"] if e["kind"] == "evict"]
    assert flat_evictions == {SIBLINGS: ["s1"], DEPARTMENT_LENDS: ["v3"], HOME_FIRST: ["v1"]}


def test_a_departments_lent_room_comes_home_before_a_siblings() -> None:
    """Bounds derived in department-room-comes-home-first.yaml."""
    name = HOME_FIRST
    (evict,) = events(name, "evict")
    assert (evict["job"], evict["reason"], evict["preemptor"], evict["t"]) == (
        "s3",
        "reclaim",
        "train",
        3600.0,
    )
    assert job(name, "train")["start"] == 3720.0
    assert job(name, "v0")["evictions"] == job(name, "v1")["evictions"] == 0


FAIR_SHARE = "fair-share-idle-room.yaml"


@pytest.mark.parametrize(
    ("half_life", "first", "second"),
    [(None, "a1", "b1"), (86400, "b1", "a1")],
    ids=["off", "on"],
)
def test_fair_share_over_time_orders_who_gets_idle_room(
    half_life: int | None, first: str, second: str
) -> None:
    """Bounds derived in fair-share-idle-room.yaml: the queue that used less lately gets the
    idle node first with `policy.fair_share.half_life`; the lowest share does without."""
    data = yaml.safe_load((HERE / FAIR_SHARE).read_text())
    if half_life is not None:
        data["policy"] = {"fair_share": {"half_life": half_life}}
    outcome = simulate(parse_scenario(data, HERE))
    starts = {e["job"]: e["t"] for e in outcome["events"] if e["kind"] == "start"}
    assert (starts[first], starts[second]) == (7200.0, 10800.0)
    assert not [e for e in outcome["events"] if e["kind"] == "evict"]


def test_fair_share_half_life_must_be_positive() -> None:
    data = yaml.safe_load((HERE / FAIR_SHARE).read_text())
    data["policy"] = {"fair_share": {"half_life": 0}}
    with pytest.raises(ScenarioError, match=r"^policy\.fair_share\.half_life: "):
        parse_scenario(data, HERE)
