"""End to end, from the CLI, with real processes on 8 virtual GPUs, on SQLite and PostgreSQL:
preemption with checkpoint and resume, the throttle, critical jobs never signalled, cancel and
logs, kill -9 of the server with nothing lost, and the 401/403/404/409 answers."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from service_support import (
    ALICE,
    BOB,
    CALDERA,
    OPS,
    Server,
    job_log,
    job_state,
    reachable_dir,
    trainer,
    wait_for,
)


def submit(server: Server, *args: str, token: str = ALICE) -> str:
    done = server.cli("submit", *args, token=token)
    job_id = done.stdout.strip()
    assert job_id.startswith("j-") and "\n" not in job_id, done.stdout
    return job_id


def status(server: Server, job_id: str, token: str = OPS) -> dict[str, Any]:
    """The job resource, through the SDK (the CLI's `status --json` is checked on its own)."""
    return server.client(token).get(job_id)


def events(server: Server, job_id: str) -> list[dict[str, object]]:
    return server.client(OPS).events(job_id)


def test_preempted_job_checkpoints_is_requeued_and_resumes_while_throttle_holds(
    make_server,
) -> None:
    server = make_server()
    # A normal job on all 8 GPUs (15 s: long enough on a loaded machine for the large job to
    # arrive while it runs); on SIGTERM it takes 3 s to write its checkpoint.
    victim = submit(
        server, "--queue", "team-a", "--gpus", "8", "--name", "victim", "--", *trainer(150, 0.1, 3)
    )
    wait_for("the victim to run", lambda: "fresh start" in job_log(server, victim))
    wait_for("a few steps", lambda: (server.client(OPS).get(victim)["progress"] or 0) > 0.02)

    large = submit(
        server,
        "--queue",
        "team-a",
        "--type",
        "large-job",
        "--gpus",
        "8",
        "--name",
        "large",
        "--",
        "sh",
        "-c",
        "echo large running; sleep 1",
    )
    wait_for("the victim to be signalled", lambda: job_state(server, victim) == "Releasing")
    queue = next(q for q in server.client().queues() if q["name"] == "team-a")
    assert queue["throttled_for"] == large  # waiting mode while the large job waits

    # A normal submission to the waiting queue is accepted and Held (through the SDK: the
    # waiting mode lasts only the victim's 3 s checkpoint, less than a CLI start on a busy host).
    held_job = server.client().submit(["sh", "-c", "echo small"], queue="team-a", gpus=1)
    held = held_job["id"]
    assert (held_job["state"], held_job["hold_reason"]) == ("Held", "throttle")

    wait_for("the large job to start", lambda: status(server, large)["start_time"] is not None)
    log = job_log(server, victim)
    assert "SIGTERM at step" in log and "checkpoint" in log
    step = int(log.split("checkpoint ")[1].split()[0])
    assert step > 0

    wait_for("the large job to succeed", lambda: job_state(server, large) == "Succeeded")
    wait_for("the victim to finish", lambda: job_state(server, victim) == "Succeeded", 45)
    wait_for("the held job to finish", lambda: job_state(server, held) == "Succeeded", 30)

    final = status(server, victim)
    assert final["evictions"] == 1
    assert final["checkpoint_step"] == step
    assert final["exit_code"] == 0
    assert f"resumed from step {step}" in job_log(server, victim)
    victim_events = events(server, victim)
    evict = next(e for e in victim_events if e["kind"] == "evict")
    assert evict["data"]["preemptor"] == large and evict["data"]["reason"] == "preempt"
    assert any(
        e["kind"] == "checkpoint" and e["data"]["reason"] == "sigterm" for e in victim_events
    )
    assert [e["kind"] for e in victim_events].count("start") == 2
    held_kinds = [(e["kind"], e["data"].get("reason")) for e in events(server, held)]
    assert ("hold", "throttle") in held_kinds and ("release", "throttle") in held_kinds
    assert status(server, large)["evictions"] == 0

    metrics = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(server.client().metrics())
        for sample in family.samples
    }
    key = (
        "caldera_preemptions_total",
        (("preemptor_type", "large-job"), ("reason", "preempt"), ("victim_type", "normal")),
    )
    assert metrics[key] == 1
    assert metrics[("caldera_critical_preempted", ())] == 0
    assert metrics[("caldera_throttle_episodes_total", ())] == 1
    assert metrics[("caldera_queue_throttled", (("queue", "team-a"),))] == 0
    assert metrics[("caldera_cycle_duration_seconds_count", ())] > 0
    assert ("caldera_queue_deserved_gpus", (("queue", "team-a"),)) in metrics


def test_critical_job_is_never_signalled(make_server) -> None:
    server = make_server()
    refused = server.cli(
        "submit", "--queue", "team-a", "--type", "critical", "--", "true", check=False
    )
    assert refused.returncode != 0 and "403" in refused.stderr
    assert "Traceback" not in refused.stderr

    script = "trap 'echo got SIGTERM; exit 1' TERM; echo serving; while true; do sleep 0.05; done"
    critical = submit(
        server,
        "--queue",
        "ops",
        "--type",
        "critical",
        "--gpus",
        "8",
        "--",
        "sh",
        "-c",
        script,
        token=OPS,
    )
    wait_for("the critical job to serve", lambda: "serving" in job_log(server, critical))
    large = submit(
        server, "--queue", "ops", "--type", "large-job", "--gpus", "8", "--", "true", token=OPS
    )
    # The cycle has looked at the large job once it put the queue in waiting mode.
    wait_for(
        "the large job's failed allocation",
        lambda: any(e["kind"] == "throttle_on" for e in events(server, large)),
    )
    normal = submit(server, "--queue", "team-a", "--gpus", "8", "--", "true")
    wait_for("a cycle with the normal job", lambda: job_state(server, normal) == "Pending")
    server.client(OPS).cancel(normal)

    assert job_state(server, critical) == "Running"
    assert job_state(server, large) == "Pending"
    assert "got SIGTERM" not in job_log(server, critical)
    assert not [e for e in events(server, critical) if e["kind"] == "evict"]
    assert status(server, critical)["evictions"] == 0

    # Its owner may still cancel it: that is a cancel, not a preemption.
    server.cli("cancel", critical, token=OPS)
    wait_for("the cancel", lambda: job_state(server, critical) == "Cancelled")
    assert "got SIGTERM" in job_log(server, critical)
    wait_for("the large job to start", lambda: job_state(server, large) == "Succeeded")


def test_cancel_and_logs(make_server) -> None:
    server = make_server()
    script = "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.05; done"
    running = submit(server, "--queue", "team-a", "--gpus", "8", "--", "sh", "-c", script)
    waiting = submit(server, "--queue", "team-a", "--gpus", "8", "--", "true")
    wait_for("output", lambda: "line 3" in job_log(server, running))
    shown = json.loads(server.cli("status", waiting, "--json").stdout)
    assert shown["state"] == "Pending" and shown["user"] == "alice" and shown["queue"] == "team-a"
    assert {
        "id",
        "name",
        "type",
        "submit_time",
        "start_time",
        "end_time",
        "evictions",
        "exit_code",
    } <= set(shown)
    assert "Pending" in server.cli("status", waiting).stdout

    env = {**os.environ, "CALDERA_URL": server.url, "CALDERA_TOKEN": ALICE}
    follower = subprocess.Popen(
        [CALDERA, "logs", running, "-f"], env=env, stdout=subprocess.PIPE, text=True
    )
    tail = server.cli("logs", running, "--tail", "2").stdout.splitlines()
    assert len(tail) == 2 and all(line.startswith("line ") for line in tail)

    done = server.cli("cancel", waiting)
    assert "cancelled" in done.stdout
    assert status(server, waiting)["state"] == "Cancelled"
    server.cli("cancel", running)
    wait_for("the running job to be cancelled", lambda: job_state(server, running) == "Cancelled")
    streamed, _ = follower.communicate(timeout=20)
    assert follower.returncode == 0
    assert "line 0" in streamed and "line 3" in streamed

    again = server.cli("cancel", running, check=False)
    assert again.returncode == 1 and "409" in again.stderr and "already ended" in again.stderr
    listed = json.loads(server.cli("list", "--json").stdout)
    assert {job["id"]: job["state"] for job in listed} == {
        running: "Cancelled",
        waiting: "Cancelled",
    }
    watched = server.cli("watch", running, check=False)
    assert watched.returncode == 1 and "cancel" in watched.stdout


def test_kill_9_server_loses_nothing_and_readopts_running_tasks(make_server) -> None:
    server = make_server()
    loop = "while true; do echo tick; sleep 0.05; done"
    survivor = submit(server, "--queue", "team-a", "--gpus", "4", "--", "sh", "-c", loop)
    go = reachable_dir("caldera-go-") / "go"  # the job account must see it appear
    gate = f"while [ ! -f {go} ]; do sleep 0.05; done; exit 3"
    ends = submit(server, "--queue", "team-a", "--gpus", "4", "--", "sh", "-c", gate)
    waiting = submit(server, "--queue", "team-a", "--gpus", "8", "--", "true")
    wait_for("both to run", lambda: job_state(server, ends) == "Running")
    wait_for("output", lambda: "tick" in job_log(server, survivor))
    pid = status(server, survivor)["placement"][0]["pid"]
    ended_pid = status(server, ends)["placement"][0]["pid"]

    server.kill9()
    os.kill(pid, 0)  # the task outlived its server
    # The other task ends while no server is watching.
    go.touch()
    wait_for("the task to exit unseen", lambda: not os.path.exists(f"/proc/{ended_pid}"))

    server.restart()
    after = status(server, survivor)
    assert after["state"] == "Running"
    assert after["placement"][0]["pid"] == pid
    wait_for("the exit code recorded", lambda: job_state(server, ends) == "Failed")
    assert status(server, ends)["exit_code"] == 3
    assert job_state(server, waiting) == "Pending"
    listed = {job["id"] for job in json.loads(server.cli("list", "--json").stdout)}
    assert listed == {survivor, ends, waiting}

    # No device is held twice: the adopted job holds 4, nothing else got them.
    cluster = server.client(OPS).cluster()
    holders = [gpu["jobs"] for gpu in cluster["nodes"][0]["gpus"]]
    assert all(len(jobs) <= 1 for jobs in holders)
    assert sum(jobs == [survivor] for jobs in holders) == 4
    assert not [e for e in events(server, survivor) if e["kind"] == "start"][1:]

    server.cli("cancel", survivor)
    wait_for("the waiting job to run", lambda: job_state(server, waiting) == "Succeeded")
    assert job_state(server, survivor) == "Cancelled"


def test_authentication_and_permissions(make_server) -> None:
    server = make_server()
    missing = server.cli("list", token=None, check=False)
    assert missing.returncode == 1 and "401" in missing.stderr and "missing" in missing.stderr
    bad = server.cli("list", token="not-a-token", check=False)
    assert bad.returncode == 1 and "401" in bad.stderr

    other_queue = server.cli("submit", "--queue", "ops", "--", "true", check=False)
    assert other_queue.returncode == 1 and "403" in other_queue.stderr
    bobs = submit(server, "--queue", "team-b", "--gpus", "0.5", "--", "true", token=BOB)
    foreign = server.cli("status", bobs, check=False)
    assert foreign.returncode == 1 and "403" in foreign.stderr and "another user" in foreign.stderr
    assert server.cli("cancel", bobs, check=False).returncode == 1
    assert status(server, bobs, token=BOB)["gpus_per_task"] == 0.5

    unknown = server.cli("status", "j-000000000000", check=False)
    assert unknown.returncode == 1 and "404" in unknown.stderr
    invalid = server.cli(
        "submit", "--queue", "team-a", "--tasks", "2", "--gpus", "0.5", "--", "true", check=False
    )
    assert invalid.returncode == 1 and "400" in invalid.stderr

    denied = server.client(ALICE)
    from caldera.sdk import ApiError

    try:
        denied.set_queue_state("team-a", "Closed")
    except ApiError as error:
        assert error.status == 403
    else:
        raise AssertionError("a non-admin closed a queue")
    server.client(OPS).set_queue_state("team-a", "Closed")
    closed = server.cli("submit", "--queue", "team-a", "--", "true", check=False)
    assert closed.returncode == 1 and "409" in closed.stderr and "Closed" in closed.stderr
    for output in (missing, bad, other_queue, foreign, unknown, invalid, closed):
        assert "Traceback" not in output.stderr
        assert len(output.stderr.strip().splitlines()) == 1
