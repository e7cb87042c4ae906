"""Every process of a job is found and killed (issue 15 item 4), with cgroup v2 and with the
runner as subreaper: a `setsid` daemon, a double fork and a child that ignores SIGTERM while
the main process exits are all gone before the job's GPUs are handed on, at cancel and at
eviction. Before, such children outlived cancel and eviction while their GPUs went to the
preemptor."""

from __future__ import annotations

from typing import Any

import pytest
from service_support import ALICE, OPS, ROOT, Server, job_log, job_processes, job_state, wait_for

from caldera.service.proctree import find_cgroup_root

# Each starts helpers that would survive a signal to the process group, then waits.
ESCAPES = {
    "setsid": 'setsid sh -c "sleep 1000" & echo started; wait',
    "double-fork": '(sh -c "sleep 1000 &" &); echo started; sleep 1000',
    "ignores-sigterm": (
        'sh -c "trap \\"\\" TERM; sleep 1000" & trap "exit 0" TERM; echo started; '
        "while true; do sleep 0.1; done"
    ),
}


@pytest.fixture
def database_url() -> None:
    return None


@pytest.fixture(params=["cgroup", "subreaper"])
def tracked_server(request: pytest.FixtureRequest, make_server: Any) -> Server:
    if not ROOT:
        pytest.skip("needs root to read every process's environment")
    if request.param == "cgroup" and find_cgroup_root()[0] is None:
        pytest.skip(f"no cgroup v2 here: {find_cgroup_root()[1]}")
    isolation = {"sandbox_user": "nobody", "tracking": request.param}
    return make_server({"isolation": isolation}, grace_period=3)


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_cancel_leaves_no_process_of_the_job(tracked_server: Server, escape: str) -> None:
    server = tracked_server
    job = server.client(ALICE).submit(["sh", "-c", ESCAPES[escape]], queue="team-a")["id"]
    wait_for("the job to start its helpers", lambda: "started" in job_log(server, job))
    wait_for("its helpers to run", lambda: len(job_processes(job)) >= 3)
    server.client(ALICE).cancel(job)

    def ended() -> bool:
        # Read the processes before the state: once Cancelled, none may have been left.
        left = job_processes(job)
        if job_state(server, job) != "Cancelled":
            return False
        assert left == [], f"{escape}: {left} outlived the cancel"
        return True

    wait_for("the job to be cancelled", ended, 30)


def test_gpus_go_to_the_preemptor_only_after_every_process_of_the_victim_is_gone(
    tracked_server: Server,
) -> None:
    server = tracked_server
    escapes = " ".join(
        f"({ESCAPES[name].replace('echo started; ', '')}) &" for name in sorted(ESCAPES)
    )
    victim = server.client(ALICE).submit(
        ["sh", "-c", f"{escapes} echo started; wait"], queue="team-a", gpus=8
    )["id"]
    wait_for("the victim's helpers", lambda: len(job_processes(victim)) >= 6)
    large = server.client(OPS).submit(["sleep", "30"], queue="team-a", type="large-job", gpus=8)
    seen: list[int] = []

    def preemptor_started() -> bool:
        # The state first, then the processes: read the other way round, a victim process
        # seen just before the runtime reaped it would count against a start that came after.
        if server.client(OPS).get(large["id"])["state"] != "Running":
            return False
        seen.extend(job_processes(victim))
        return True

    wait_for("the large job to start", preemptor_started, 60)
    assert seen == [], f"{seen} of the victim still ran when its GPUs were handed on"
    assert server.client(OPS).get(victim)["evictions"] == 1
