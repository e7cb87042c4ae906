"""Per-task limits through real cgroups (`caldera.service.cgroups`; docs/service.md "Security
model"): a memory hog is OOM-killed and its job fails with the reason, a fork bomb stops at
its process limit, a CPU spinner stays within its quota while a well-behaved job beside it
runs. These need root and a cgroup controller (CI runs as root on a host that mounts cgroup
v1): elsewhere they skip, and under CI=true they fail instead.

Each test prints what it measured (`-s` shows it): the figures docs/service.md quotes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from service_support import JOB_PYTHON, OPS, ROOT, SANDBOX, Server, job_log

from caldera.service.cgroups import detect
from caldera.service.proctree import find_cgroup_root
from polling import wait_for

pytestmark = pytest.mark.parametrize("database_url", [None])  # SQLite: what is tested is the host


def _limits_here() -> str:
    """Why these tests cannot run here ('' when they can)."""
    if not ROOT:
        return "needs root: only root may make cgroups and move jobs into them"
    found, why = detect("auto", find_cgroup_root()[0])
    if found is None:
        return f"no usable cgroup controller: {why}"
    missing = {"memory", "pids", "cpu"} - set(found.controllers)
    return f"cgroups here lack {', '.join(sorted(missing))}" if missing else ""


@pytest.fixture
def contained(make_server: Callable[..., Server]) -> Server:
    reason = _limits_here()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the containment tests must run in CI: {reason}")
        pytest.skip(reason)
    isolation = {"sandbox_user": SANDBOX, "task_pids": 64, "cgroups": "auto"}
    return make_server({"isolation": isolation})


def _python(code: str) -> list[str]:
    return [JOB_PYTHON, "-c", code]


def _ended(server: Server, job_id: str, timeout: float = 60) -> dict[str, Any]:
    client = server.client(OPS)
    return dict(
        wait_for(
            f"{job_id} to end",
            lambda: (job := client.get(job_id))["state"] in ("Succeeded", "Failed") and job,
            timeout=timeout,
        )
    )


def _exit_record(server: Server, job_id: str) -> dict[str, Any]:
    """What the runner recorded when the task ended (exit code, OOM kills, peaks)."""
    (path,) = (server.data_dir / "jobs" / job_id / "run").glob("a*-r0.exit")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


HOG = """
import sys
held = []
for step in range(32):  # 512 MiB in 16 MiB steps, every page written
    held.append(b"x" * (16 << 20))
    print(f"holding {(step + 1) * 16} MiB", flush=True)
print("all 512 MiB held", flush=True)
"""


def test_a_memory_hog_is_killed_at_its_limit_and_its_job_fails_saying_so(
    contained: Server,
) -> None:
    client = contained.client()
    job = client.submit(_python(HOG), queue="team-a", gpus=0, memory="128Mi", name="hog")
    ended = _ended(contained, job["id"])
    assert ended["state"] == "Failed"
    assert ended["reason"] == "out of memory (limit 128 MiB)"
    record = _exit_record(contained, job["id"])
    assert record["oom_kills"] >= 1
    assert record["memory_limit"] == 128 << 20
    assert record["memory_peak"] <= 128 << 20
    log = job_log(contained, job["id"])
    assert "all 512 MiB held" not in log
    assert "caldera: out of memory (limit 128 MiB)" in log
    kinds = {(e["kind"], (e.get("data") or {}).get("reason")) for e in client.events(job["id"])}
    assert ("oom", "out of memory (limit 128 MiB)") in kinds
    held = [line for line in log.splitlines() if line.startswith("holding")]
    print(f"\nmemory hog: {held[-1] if held else 'nothing'} before the kill; "
          f"peak {record['memory_peak'] / 2**20:.1f} MiB of 128 MiB")  # fmt: skip


BOMB = """
import os, time
children = refused = 0
for _ in range(300):  # at most 300 forks: the bomb ends by itself on any host
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(4)
        os._exit(0)
    children += 1
print(f"forked {children}, refused {refused}", flush=True)
"""


def test_a_fork_bomb_stops_at_its_process_limit_and_harms_nobody_else(
    contained: Server,
) -> None:
    client = contained.client()
    bomb = client.submit(_python(BOMB), queue="team-a", gpus=0, name="bomb")
    fine = client.submit(
        _python("import os; [os.waitpid(os.fork() or os._exit(0), 0) for _ in range(20)]"),
        queue="team-a",
        gpus=0,
        name="neighbour",
    )
    assert _ended(contained, bomb["id"])["state"] == "Succeeded"
    assert _ended(contained, fine["id"])["state"] == "Succeeded"  # it forked 20 times, fine
    log = job_log(contained, bomb["id"])
    forked, refused = (int(w.strip(",")) for w in log.split("forked ")[1].split()[::2][:2])
    assert forked <= 63  # pids.max 64, the bomb itself included
    assert refused >= 300 - 63
    assert _exit_record(contained, bomb["id"])["pids_refused"] >= refused
    print(f"\nfork bomb: {forked + 1} processes (limit 64), {refused} forks refused")


SPINNER = """
import os, time
pids = []
for _ in range(2):  # two processes spinning for 3 s of wall time each
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
times = os.times()
print(f"spun {times.children_user + times.children_system:.3f} s of CPU in 3 s", flush=True)
"""

STEADY = """
import time
start, cpu = time.monotonic(), time.process_time()
while time.process_time() - cpu < 1.0:  # one second of CPU work
    pass
print(f"worked 1 s of CPU in {time.monotonic() - start:.3f} s", flush=True)
"""


def test_a_cpu_spinner_stays_within_its_quota_beside_a_job_that_finishes(
    contained: Server,
) -> None:
    client = contained.client()
    spinner = client.submit(_python(SPINNER), queue="team-a", gpus=0, cpu="500m", name="spin")
    steady = client.submit(_python(STEADY), queue="team-a", gpus=0, cpu=1, name="steady")
    started = time.monotonic()
    assert _ended(contained, steady["id"])["state"] == "Succeeded"
    assert _ended(contained, spinner["id"])["state"] == "Succeeded"
    spun = float(job_log(contained, spinner["id"]).split("spun ")[1].split()[0])
    worked = float(job_log(contained, steady["id"]).split(" in ")[1].split()[0])
    # Two processes spinning for 3 s would use up to 6 s of CPU; the quota (0.5 CPU) allows
    # 1.5 s in 3 s, plus what one CFS period lets through at the start and the end.
    assert spun <= 1.5 * 1.1 + 0.1
    print(
        f"\ncpu: spinner (cpu 0.5, 2 processes) used {spun:.2f} s in 3 s "
        f"({spun / 3:.2f} CPU); steady job (cpu 1) did 1 s of CPU in {worked:.2f} s "
        f"({1 / worked:.2f} CPU); both ended {time.monotonic() - started:.1f} s after submit"
    )


def test_without_a_request_a_task_gets_its_queues_memory_default(
    make_server: Callable[..., Server], tmp_path: Path
) -> None:
    reason = _limits_here()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the containment tests must run in CI: {reason}")
        pytest.skip(reason)
    isolation = {
        "sandbox_user": SANDBOX,
        "task_memory": "1Gi",
        "queue_memory": {"team-a": "96Mi"},
    }
    server = make_server({"isolation": isolation})
    job = server.client().submit(_python(HOG), queue="team-a", gpus=0, name="hog")
    ended = _ended(server, job["id"])
    assert (ended["state"], ended["reason"]) == ("Failed", "out of memory (limit 96 MiB)")


def test_a_retried_job_keeps_the_oom_in_its_events_not_in_its_reason(contained: Server) -> None:
    code = 'import os\nif os.environ["CALDERA_ATTEMPT"] == "1":\n' + HOG.replace("\n", "\n    ")
    client = contained.client()
    job = client.submit(
        _python(code), queue="team-a", gpus=0, memory="128Mi", max_retries=1, name="retried"
    )
    ended = _ended(contained, job["id"])
    assert (ended["state"], ended["reason"]) == ("Succeeded", None)
    events = client.events(job["id"])
    assert [e["data"]["reason"] for e in events if e["kind"] == "oom"] == [
        "out of memory (limit 128 MiB)"
    ]
