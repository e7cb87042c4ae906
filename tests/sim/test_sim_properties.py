"""Hypothesis properties of whole simulations with preemption (DESIGN §3, §4.5, §5).

Random scenarios (as decoded YAML, through the real loader) run in a `CheckedSimulator` that
verifies, at every cycle and after every event:
- each cycle's decisions obey the §3/§4 rules (`invariant_checks.violations` on its
  snapshot);
- the world after applying them: the free-room index equals a rebuild from the jobs (so no
  node is over capacity and no GPU is lost or given twice), no running gang below
  `min_available`, no queue over its capability, hard topology and NVLink islands honoured;
and, over the event log: no protected / critical / kube-system job evicted, no eviction for a
debug job, no job evicted twice within the cooldown except by a critical job, lost work
adding up; and in the metrics `critical_preempted == 0`, `gang_hang_gpu_hours == 0`. The
result validates against the published schema.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from caldera.core import Decisions, Room, Snapshot
from caldera.model import JobState, Resources, TopologyMode
from caldera.sim import Simulator, parse_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from invariant_checks import island_ok, one_domain, violations

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "shared" / "schemas"
CRITICAL = 1000


class CheckedSimulator(Simulator):
    """The real simulator, with every invariant checked at every cycle and event."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.problems: list[str] = []
        self._last: Snapshot | None = None
        self.cycles = 0

    def snapshot(self) -> Snapshot:
        self._last = super().snapshot()
        return self._last

    def _apply(self, decisions: Decisions, snapshot: Snapshot) -> None:
        self.cycles += 1
        if self._last is not None:
            for problem in violations(self._last, decisions):
                self._note(f"cycle: {problem}")
        super()._apply(decisions, snapshot)
        self._check_world("after a cycle")

    def _apply_event(self, kind: int, job_id: str, data: int) -> None:
        super()._apply_event(kind, job_id, data)
        self._check_world("after an event")

    def _note(self, problem: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(f"t={self.now}: {problem}")

    def _check_world(self, when: str) -> None:
        nodes = self.nodes
        rebuilt = Room(nodes)
        held: dict[str, Resources] = {}
        for job in self.active.values():
            spec = job.spec
            placement = [t.placement for t in job.running]
            tasks = [t.placement for t in job.tasks]
            for task in tasks:
                try:
                    rebuilt.take(task)
                except Exception as error:  # CapacityError: over capacity
                    self._note(f"{when}: {spec.id}: {error}")
                if not island_ok(nodes[task.node], task):
                    self._note(f"{when}: {spec.id}: task straddles NVLink islands")
            held[spec.queue] = held.get(spec.queue, Resources()) + spec.task_request.scaled(
                len(tasks)
            )
            if job.state is JobState.RUNNING:
                if len(placement) < spec.min_available:
                    self._note(f"{when}: {spec.id} runs {len(placement)} tasks < min")
                topology = spec.topology
                if (
                    topology is not None
                    and topology.mode is TopologyMode.HARD
                    and not one_domain(nodes, placement, topology.highest_tier)
                ):
                    self._note(f"{when}: {spec.id} outside one tier-{topology.highest_tier}")
            elif placement:
                self._note(f"{when}: {spec.id} is {job.state} but holds tasks")
        if rebuilt.fingerprint() != self.room.fingerprint():
            self._note(f"{when}: the free-room index differs from the jobs' placements")
        for name, queue in self.queues.items():
            if not held.get(name, Resources()).fits_in(queue.capability):
                self._note(f"{when}: queue {name} over its capability")


# -- random scenarios ----------------------------------------------------------------------

JOB_TYPES = ["critical", "large-job", "large-job", "normal", "normal", "normal", "debug"]


@st.composite
def scenarios(
    draw: st.DrawFn, max_nodes: int = 4, max_jobs: int = 18, capability: bool = True
) -> dict[str, Any]:
    """`max_nodes` per group (up to two groups) and `max_jobs` size the scenario; the
    defaults keep the 60 CI examples at a few seconds. Larger ones (8, 40) found B13-B15.
    `capability`: whether queues may get one (a switch for bisecting a failure)."""
    groups = []
    total = 0
    for i in range(draw(st.integers(1, 2))):
        count = draw(st.integers(1, max_nodes))
        gpus = draw(st.sampled_from([4, 8]))
        total += count * gpus
        groups.append(
            {
                "prefix": f"g{i}",
                "count": count,
                "gpus": gpus,
                "gpu_model": ["H100", "A100"][i],
                "nvlink_island": draw(st.sampled_from([0, 2, 4])),
                "nodes_per_tier1": draw(st.integers(0, 2)),
                "tier1_per_tier2": draw(st.integers(0, 2)),
            }
        )
    queues = []
    for i in range(draw(st.integers(1, 3))):
        deserved = draw(st.integers(1, total))
        queue: dict[str, Any] = {
            "name": f"q{i}",
            "weight": draw(st.integers(1, 4)),
            "deserved": {"gpu": deserved},
            "reclaimable": draw(st.booleans()),
        }
        if draw(st.booleans()):
            queue["guarantee"] = {"gpu": draw(st.integers(0, deserved))}
        if capability and draw(st.booleans()):
            queue["capability"] = {"gpu": draw(st.integers(deserved, total))}
        if draw(st.integers(0, 9)) == 0:
            queue["time_windows"] = [{"days": [1, 2, 3, 4, 5], "hours": [1, 2.5]}]
        queues.append(queue)
    names = [q["name"] for q in queues]
    jobs = []
    for i in range(draw(st.integers(1, max_jobs))):
        tasks = draw(st.integers(1, 4))
        gpus = draw(st.sampled_from([0.5, 1, 2, 4, 8] if tasks == 1 else [1, 2, 4, 8]))
        job: dict[str, Any] = {
            "name": f"j{i}",
            "queue": draw(st.sampled_from(names)),
            "type": draw(st.sampled_from(JOB_TYPES)),
            "submit": 60 * draw(st.integers(0, 60)),
            "duration": 60 * draw(st.integers(1, 180)),
            "tasks": tasks,
            "gpus_per_task": gpus,
            "min_available": draw(st.integers(1, tasks)),
            "checkpoint_cost": draw(st.sampled_from([0, 30, 200])),
            "checkpoint_on_sigterm": draw(st.booleans()),
        }
        if draw(st.booleans()):
            job["checkpoint_interval"] = draw(st.sampled_from([300, 1800]))
        if draw(st.booleans()):  # sometimes wrong: planned starts and waits trust it
            job["expected_duration"] = job["duration"] * draw(st.sampled_from([1, 1, 0.5, 2]))
        if draw(st.integers(0, 9)) == 0:
            job["labels"] = {"protected": "true"}
        if draw(st.integers(0, 14)) == 0:
            job["namespace"] = "kube-system"
        if tasks > 1 and draw(st.booleans()):
            job["topology"] = {
                "mode": draw(st.sampled_from(["hard", "soft"])),
                "highest_tier": draw(st.sampled_from([1, 2])),
            }
        if draw(st.integers(0, 4)) == 0:
            job["gpu_model"] = draw(st.sampled_from(["H100", "A100"]))
        if draw(st.integers(0, 14)) == 0:  # at the submit instant too (B8)
            job["cancel_at"] = job["submit"] + 60 * draw(st.integers(0, 60))
        jobs.append(job)
    policy = {
        "grace_period": draw(st.sampled_from([30, 120])),
        "eviction_budget": draw(st.sampled_from([0.3, 1.0])),
        "throttle_timeout": 300,
        # issue 37's rules: evictions timed to checkpoints (600 s is the default), backfill
        # into a planned start's room, a gang's reclaim search again on clearable nodes,
        # large gangs anchoring their leaf (packing), critical work packed by lossless
        # eviction (defrag)
        "checkpoint_wait": draw(st.sampled_from([600, 600, 0, 3600])),
        "planned_backfill": draw(st.booleans()),
        "reclaim_whole_nodes": draw(st.booleans()),
        "keep_leaves_whole": draw(st.booleans()),
        "pack_with_victims": draw(st.booleans()),
    }
    return {
        "cluster": {"nodes": groups},
        "queues": queues,
        "policy": policy,
        "jobs": jobs,
        "until": 4 * 86_400,
    }


@functools.cache
def output_schema() -> dict[str, Any] | None:
    path = SCHEMA_PATH / "simulate-output.schema.json"
    return json.loads(path.read_text()) if path.is_file() else None


def event_log_problems(
    result: dict[str, Any], data: dict[str, Any], cooldown: float, grace: float
) -> list[str]:
    """The rules that read off the output document alone — what an evaluator sees."""
    problems: list[str] = []
    specs = {j["name"]: j for j in data["jobs"]}
    priority = {"critical": 1000, "large-job": 800, "normal": 100, "debug": 50}
    capacity = sum(g["count"] * g["gpus"] for g in data["cluster"]["nodes"])
    last_evicted: dict[str, float] = {}
    lost: dict[str, float] = {}
    held: dict[str, float] = {}  # GPUs each job holds, running or releasing
    leaving: list[tuple[float, str, float]] = []  # (released_at, job, gpus)

    def release_until(t: float) -> None:
        for item in sorted(x for x in leaving if x[0] <= t):
            leaving.remove(item)
            held[item[1]] -= item[2]

    for event in result["events"]:
        t, kind, name = event["t"], event["kind"], event["job"]
        if kind in ("start", "evict", "finish", "cancel"):
            release_until(t)
        if kind == "start":
            spec = specs[name]
            if not event.get("grow") and event["tasks"] < spec.get(
                "min_available", spec.get("tasks", 1)
            ):
                problems.append(f"t={t}: {name} started {event['tasks']} tasks < min_available")
            if abs(sum(event["placement"].values()) - event["gpus"]) > 1e-9:
                problems.append(f"t={t}: {name} placement does not add up to gpus")
            held[name] = held.get(name, 0.0) + event["gpus"]
            most = spec.get("tasks", 1) * spec.get("gpus_per_task", 1)
            # running and releasing together: a replacement never starts while the replica
            # it replaces is still in its grace period (B12)
            if held[name] > most + 1e-9:
                problems.append(f"t={t}: {name} holds {held[name]} GPUs, asked for {most}")
            if sum(held.values()) > capacity + 1e-9:
                problems.append(f"t={t}: {sum(held.values())} GPUs held of {capacity}")
        elif kind == "finish":
            held[name] = sum(g for _, j, g in leaving if j == name)  # only what is leaving
        if kind != "evict":
            continue
        victim = specs[name]
        lost[name] = lost.get(name, 0.0) + event["lost_gpu_seconds"]
        if not t <= event["released_at"] <= t + grace + 1e-9:
            problems.append(f"t={t}: {name} released at {event['released_at']}")
        leaving.append((event["released_at"], name, event["gpus"]))
        if event["reason"] != "cancel" and (  # a user may cancel anything of theirs
            victim["type"] == "critical"
            or victim.get("labels", {}).get("protected") == "true"
            or victim.get("namespace") == "kube-system"
        ):
            problems.append(f"t={t}: {name} ({victim['type']}) must never be evicted")
        preemptor = event.get("preemptor")
        if event["reason"] in ("preempt", "reclaim"):
            p = specs.get(preemptor or "")
            if p is None:
                problems.append(f"t={t}: {name} evicted without a preemptor")
            else:
                if p["type"] == "debug":
                    problems.append(f"t={t}: debug job {preemptor} caused an eviction")
                same_queue = p["queue"] == victim["queue"]
                if event["reason"] == "preempt" and not same_queue:
                    problems.append(f"t={t}: {preemptor} preempted {name} of another queue")
                if event["reason"] == "reclaim" and same_queue:
                    problems.append(f"t={t}: {preemptor} reclaimed {name} of its own queue")
                # inside a queue priorities decide; across queues shares (DESIGN §4.1)
                if event["reason"] == "preempt" and priority[p["type"]] <= priority[victim["type"]]:
                    problems.append(f"t={t}: {preemptor} evicted {name}, not lower")
                before = last_evicted.get(name)
                if before is not None and t - before < cooldown and p["type"] != "critical":
                    problems.append(
                        f"t={t}: {name} evicted again {t - before}s after the last time,"
                        f" by non-critical {preemptor}"
                    )
        last_evicted[name] = t
    problems += throttle_problems(result, data, specs, priority)
    for record in result["jobs"]:
        want = round(lost.get(record["name"], 0.0), 6)
        if abs(record["lost_gpu_seconds"] - want) > 1e-3:
            problems.append(f"{record['name']}: lost {record['lost_gpu_seconds']} != {want}")
        if record["state"] == "Succeeded":
            duration = specs[record["name"]]["duration"]
            if record["end"] - record["start"] < duration - 1e-6:
                problems.append(f"{record['name']}: finished faster than its duration")
    return problems


def throttle_problems(
    result: dict[str, Any],
    data: dict[str, Any],
    specs: dict[str, dict[str, Any]],
    priority: dict[str, int],
) -> list[str]:
    """DESIGN §4.4: while a queue waits for its large job, its new submissions below 800 are
    held; waiting ends when the large job starts or after the timeout; held jobs are then
    released in submission order."""
    problems: list[str] = []
    timeout = data.get("policy", {}).get("throttle_timeout", 300)
    events = result["events"]
    waiting: dict[str, tuple[float, str]] = {}  # queue -> (since, large job)
    large_started: dict[str, float] = {}  # queue -> when its awaited large job started
    for i, event in enumerate(events):
        t, kind, name = event["t"], event["kind"], event["job"]
        if kind == "throttle_on":
            waiting[event["queue"]] = (t, event["large_job"])
        elif kind == "throttle_off":
            since, _ = waiting.pop(event["queue"], (None, None))
            started = large_started.pop(event["queue"], None)
            if since is None:
                problems.append(f"t={t}: throttle_off for {event['queue']} without an on")
            elif t > since + timeout + 1e-9 or (started is not None and t > started):
                problems.append(f"t={t}: waiting mode of {event['queue']} ended late")
            released = [
                e["job"]
                for e in events[i + 1 :]
                if e["t"] == t
                and e["kind"] == "release"
                and e.get("reason") == "throttle"
                and specs[e["job"]]["queue"] == event["queue"]
            ]
            submits = [specs[j]["submit"] for j in released]
            if submits != sorted(submits):
                problems.append(f"t={t}: held jobs of {event['queue']} released out of order")
        elif kind == "start" and not event.get("grow"):
            for queue, (_, large) in waiting.items():
                if large == name:
                    large_started.setdefault(queue, t)
        elif (
            kind == "submit"
            and specs[name]["queue"] in waiting
            and priority[specs[name]["type"]] < 800
        ):
            follow = [e for e in events[i + 1 :] if e["t"] == t and e["job"] == name]
            if not follow or follow[0]["kind"] not in ("hold", "reject"):
                problems.append(f"t={t}: {name} submitted to a waiting queue, not held")
    for queue in large_started:
        problems.append(f"{queue}: still waiting after its large job started")
    return problems


@given(data=scenarios())
def test_every_invariant_holds_at_every_event(data: dict[str, Any]) -> None:
    check_whole_run(data)


@settings(max_examples=settings.default.max_examples // 2)  # half the profile's: slower
@given(data=scenarios(max_nodes=8, max_jobs=40))
def test_every_invariant_holds_in_crowded_clusters(data: dict[str, Any]) -> None:
    """Bigger clusters and more jobs, the same checks (runs of this size found B13-B15)."""
    check_whole_run(data)


def test_an_own_queue_victim_of_a_reclaim_waits_for_its_preemptor() -> None:
    """The case hypothesis found (tests/sim/found/reclaim-own-victim-returns.yaml): a
    reclaimer's own-queue victim, released at once, may not start again beside it while the
    plan that counted it gone waits for its reclaim victim (CycleContext.may_return)."""
    events = found_run("reclaim-own-victim-returns.yaml")
    evicted = next(e["t"] for e in events if e["kind"] == "evict" and e["job"] == "j22")
    preemptor = next(e["t"] for e in events if e["kind"] == "start" and e["job"] == "j9")
    restarts = [e["t"] for e in events if e["kind"] == "start" and e["job"] == "j22"]
    assert evicted < preemptor
    assert restarts[-1] > preemptor


def test_a_victim_a_plan_has_yet_to_signal_no_longer_counts_as_its_queues() -> None:
    """The case hypothesis found (tests/sim/found/reclaim-floor-pending-victim.yaml): a
    later reclaim in the same cycle must count the pending victim as gone from its queue
    (QueueUsage.kept), so it does not take the queue below its deserved share; j30 then
    waits for the room j17 leaves instead of reclaiming j21."""
    events = found_run("reclaim-floor-pending-victim.yaml")
    assert not any(e["kind"] == "evict" and e["job"] == "j21" for e in events)
    assert any(e["kind"] == "evict" and e["job"] == "j17" for e in events)


def test_a_reclaim_waits_no_more_for_a_victim_once_its_queue_is_over_its_share() -> None:
    """The case hypothesis found (tests/sim/found/reclaim-own-queue-grows.yaml): j2's plan
    keeps q0 within its deserved share when it is made, but the critical j8 starts in q0 before
    the budget lets the reclaim victim j0 go; signalling j0 then would reclaim for a queue over
    its share, so the plan is given up and j2 waits for room instead."""
    events = found_run("reclaim-own-queue-grows.yaml")
    assert any(e["kind"] == "evict" and e["job"] == "j3" for e in events)
    assert not any(e["kind"] == "evict" and e["job"] == "j0" for e in events)
    j0_done = next(e["t"] for e in events if e["kind"] == "finish" and e["job"] == "j0")
    assert next(e["t"] for e in events if e["kind"] == "start" and e["job"] == "j2") >= j0_done


def test_a_non_critical_plan_signals_its_pending_victims_after_its_pass_allocates() -> None:
    """The case hypothesis found (tests/sim/found/reclaim-own-queue-starts-after-signal.yaml):
    j9's pending reclaim victim j0 was signalled in the critical pass, and q0's j8 started
    after it on the room j9's own-queue victim left, so q0 reclaimed while over its share. A
    non-critical plan now goes on in the non-critical pass, after that pass's allocate: j8
    starts first, q0 is over its share, and the plan is given up (B18) instead of taking j0."""
    events = found_run("reclaim-own-queue-starts-after-signal.yaml")
    assert any(e["kind"] == "evict" and e["job"] == "j5" for e in events)
    assert any(e["kind"] == "start" and e["job"] == "j8" and e["t"] == 2880 for e in events)
    assert not any(e["kind"] == "evict" and e["job"] == "j0" and e["t"] == 2880 for e in events)


def test_a_timed_victim_whose_weight_grew_past_its_preemptor_is_not_signalled() -> None:
    """The case hypothesis found (tests/sim/found/timed-eviction-weight-grew.yaml): j20
    (normal, 100) planned at 1860 to preempt the debug job j31 just after its checkpoint at
    2100 (core/timing.py); by then j31's age/progress weight had grown to 100 and defended it,
    yet it was signalled. Now a pending same-queue victim whose W_eff defends it gives the plan
    up (eviction.no_longer_a_victim) and j20 plans afresh."""
    events = found_run("timed-eviction-weight-grew.yaml")
    assert not any(e["kind"] == "evict" and e.get("preemptor") == "j20" for e in events)
    assert any(e["kind"] == "start" and e["job"] == "j20" for e in events)


def found_run(name: str) -> list[dict[str, Any]]:
    """The events of a case hypothesis found (tests/sim/found/NAME), every check passed."""
    import yaml

    path = Path(__file__).resolve().parent / "found" / name
    return check_whole_run(yaml.safe_load(path.read_text()))["events"]


def check_whole_run(data: dict[str, Any]) -> dict[str, Any]:
    """Simulate `data` with every invariant checked; its §6 result when all hold."""
    scenario = parse_scenario(data)
    sim = CheckedSimulator(scenario)
    result = sim.run().result()
    assert sim.problems == []
    assert (
        event_log_problems(result, data, scenario.config.cooldown, scenario.config.grace_period)
        == []
    )
    metrics = result["metrics"]
    assert metrics["critical_preempted"] == 0
    assert metrics["gang_hang_gpu_hours"] == 0
    schema = output_schema()
    if schema is not None:  # ../shared beside the checkout
        jsonschema.validate(result, schema)
    return result


@given(scenarios())
def test_the_same_scenario_gives_the_same_result(data: dict[str, Any]) -> None:
    first = Simulator(parse_scenario(data)).run().result()
    second = Simulator(parse_scenario(data)).run().result()
    assert first == second


@st.composite
def critical_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """One queue kept busy by normal, large and debug work (gangs, topology, checkpoints),
    and critical one-task jobs arriving one at a time (each done before the next comes).
    Expected durations may be under the real ones (B9: backfill must not trust them)."""
    count = draw(st.integers(2, 6))
    nodes = [
        {
            "prefix": "n",
            "count": count,
            "gpus": 8,
            "nvlink_island": draw(st.sampled_from([0, 4])),
            "nodes_per_tier1": draw(st.integers(0, 3)),
        }
    ]
    jobs: list[dict[str, Any]] = []
    for i in range(draw(st.integers(count, 4 * count))):
        tasks = draw(st.integers(1, 4))
        duration = 600 * draw(st.integers(1, 40))
        job: dict[str, Any] = {
            "name": f"w{i}",
            "queue": "q",
            "type": draw(st.sampled_from(["normal", "normal", "large-job", "debug"])),
            "submit": 10 * draw(st.integers(0, 60)),
            "duration": duration,
            "tasks": tasks,
            "gpus_per_task": draw(st.sampled_from([1, 2, 4, 8])),
            "min_available": draw(st.integers(1, tasks)),
            "checkpoint_cost": draw(st.sampled_from([0, 30, 200])),
            "checkpoint_on_sigterm": draw(st.booleans()),
        }
        if draw(st.booleans()):
            job["expected_duration"] = duration * draw(st.sampled_from([0.25, 1, 2]))
        if tasks > 1 and draw(st.booleans()):
            job["topology"] = {"mode": draw(st.sampled_from(["hard", "soft"]))}
        jobs.append(job)
    for k in range(draw(st.integers(1, 4))):
        jobs.append(
            {
                "name": f"c{k}",
                "queue": "q",
                "type": "critical",
                "submit": 1000 + 2000 * k + draw(st.integers(0, 300)),
                "duration": draw(st.integers(60, 1500)),
                "gpus_per_task": draw(st.sampled_from([1, 2, 4, 8])),
            }
        )
    grace = draw(st.sampled_from([30, 120]))
    return {
        "cluster": {"nodes": nodes},
        "queues": [{"name": "q"}],
        "policy": {"grace_period": grace},
        "jobs": jobs,
        "until": 12_000,
    }


@given(data=critical_scenarios())
def test_critical_jobs_start_within_one_grace_period(data: dict[str, Any]) -> None:
    """DESIGN goal 1: critical work starts fast. Everything else in the queue may be taken
    (W_eff ≤ 800 < 1000, cooldown does not apply), victims release within the grace period,
    and the budget (at least one node's worth, and always one unit) spreads a one-node plan
    over at most a few one-second cycles: start ≤ submit + grace + 5."""
    scenario = parse_scenario(data)
    sim = CheckedSimulator(scenario)
    result = sim.run().result()
    assert sim.problems == []
    grace = scenario.config.grace_period
    for record in result["jobs"]:
        if record["type"] == "critical":
            assert record["start"] is not None, record
            assert record["start"] - record["submit"] <= grace + 5, record
            assert record["evictions"] == 0


def test_the_event_log_checks_can_fail() -> None:
    """The document checks above are only worth something if they see a broken log."""
    data = {
        "cluster": {"nodes": [{"prefix": "n", "count": 1, "gpus": 8}]},
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "v",
                "queue": "q",
                "type": "normal",
                "submit": 0,
                "duration": 900,
                "gpus_per_task": 8,
                "tasks": 1,
            },
            {
                "name": "g",
                "queue": "q",
                "type": "large-job",
                "submit": 10,
                "duration": 100,
                "gpus_per_task": 4,
                "tasks": 2,
            },
        ],
    }
    clean = Simulator(parse_scenario(data)).run().result()
    assert event_log_problems(clean, data, 600, 120) == []

    def corrupted(change: Any) -> list[str]:
        document = json.loads(json.dumps(clean))
        change(document)
        return event_log_problems(document, data, 600, 120)

    def first(document: dict[str, Any], kind: str, job: str) -> dict[str, Any]:
        return next(e for e in document["events"] if e["kind"] == kind and e["job"] == job)

    assert corrupted(lambda d: first(d, "start", "g").update(tasks=1))  # below the gang
    assert corrupted(lambda d: first(d, "evict", "v").update(preemptor="v"))  # equal priority
    assert corrupted(lambda d: first(d, "evict", "v").update(released_at=10_000))  # > grace
    data["jobs"][0]["type"] = "critical"
    assert event_log_problems(clean, data, 600, 120)  # a critical victim
    data["jobs"][0]["type"] = "normal"
    assert corrupted(lambda d: first(d, "start", "g").update(gpus=16))  # over capacity
    # waiting mode that never ends although its large job started
    assert corrupted(
        lambda d: d.update(events=[e for e in d["events"] if e["kind"] != "throttle_off"])
    )
