"""The cgroup seam against fake cgroup file trees (`caldera.service.cgroups`): what each
version writes for a task's limits, how the server enables controllers in its own v2
subtree, how an OOM kill and refused forks are read back, and the start-up line. The real
kernel is exercised by test_containment.py (v1 on CI's hosts, whose unified v2 hierarchy
offers no controller: the v2 path is checked here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caldera.service.cgroups import CgroupsV1, CgroupsV2, TaskLimits, detect, usage
from caldera.service.isolation import Isolation, IsolationModel
from caldera.service.launcher import JobFiles, end_reason
from caldera.service.proctree import find_cgroup_root

LIMITS = TaskLimits(memory_bytes=128 << 20, pids=64, millicores=1500)


def _v2_tree(tmp_path: Path, offered: str, parent_offers: str) -> Path:
    """The server's own cgroup (offering `parent_offers`) and its `caldera-tasks` folder
    (offered `offered`), with the files a kernel would show."""
    own = tmp_path / "server.service"
    root = own / "caldera-tasks"
    root.mkdir(parents=True)
    (own / "cgroup.controllers").write_text(parent_offers + "\n")
    (own / "cgroup.subtree_control").write_text("")
    (root / "cgroup.controllers").write_text(offered + "\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def test_v2_enables_the_controllers_offered_and_writes_a_tasks_limits(tmp_path: Path) -> None:
    root = _v2_tree(tmp_path, "cpuset cpu io memory pids", "cpuset cpu io memory pids")
    cgroups, why = CgroupsV2.enable(root)
    assert cgroups is not None, why
    assert cgroups.controllers == ("memory", "pids", "cpu")
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"  # the last one written
    (root / "job-a0-r0").mkdir()
    (root / "job-a0-r0" / "memory.swap.max").write_text("max\n")
    (folder,) = cgroups.create("job-a0-r0", LIMITS)
    assert folder == root / "job-a0-r0"
    written = {f.name: f.read_text() for f in folder.iterdir()}
    assert written == {
        "memory.max": str(128 << 20),
        "memory.swap.max": "0",
        "pids.max": "64",
        "cpu.max": "150000 100000",  # 1.5 CPU: 150 ms every 100 ms period
        "cpu.weight": "150",
    }


def test_v2_asks_the_servers_own_cgroup_for_controllers_it_does_not_offer_yet(
    tmp_path: Path,
) -> None:
    root = _v2_tree(tmp_path, "", "memory pids")
    found, why = CgroupsV2.enable(root)
    # A fake tree is not a kernel: writing +memory to the parent offers nothing to `root`.
    assert found is None
    assert (root.parent / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert why.endswith("(they cannot be enabled)")


def test_v2_without_controllers_says_why_in_one_line(tmp_path: Path) -> None:
    root = _v2_tree(tmp_path, "", "")
    found, why = CgroupsV2.enable(root)
    assert found is None
    assert why == f"cgroup v2 has no memory, pids or cpu controller for {root} (it offers none)"


def test_v2_reads_an_oom_kill_and_the_peak(tmp_path: Path) -> None:
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    (folder / "memory.max").write_text(f"{128 << 20}\n")
    (folder / "memory.peak").write_text(f"{(128 << 20) - 4096}\n")
    (folder / "pids.events").write_text("max 7\n")
    used = usage([folder])
    assert (used.oom_kills, used.memory_limit, used.pids_refused) == (1, 128 << 20, 7)
    assert used.memory_peak == (128 << 20) - 4096


MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
31 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/pids rw,relatime shared:11 - cgroup cgroup rw,pids
33 25 0:29 / /sys/fs/cgroup/unified rw,relatime shared:12 - cgroup2 cgroup2 rw
"""


def test_v1_finds_the_hierarchies_from_mountinfo(tmp_path: Path) -> None:
    text = MOUNTINFO.replace("/sys/fs/cgroup", str(tmp_path))
    for name in ("cpu", "memory", "pids", "unified"):
        (tmp_path / name).mkdir()
    found, why = CgroupsV1.find(text)
    assert found is not None, why
    assert found.mounts == {c: tmp_path / c for c in ("memory", "pids", "cpu")}
    assert found.describe().startswith(f"cgroup v1 (memory at {tmp_path}/memory/caldera, ")


def test_v1_writes_a_tasks_limits_in_each_hierarchy(tmp_path: Path) -> None:
    mounts = {c: tmp_path / c for c in ("memory", "pids", "cpu")}
    cgroups = CgroupsV1(mounts)
    memory = mounts["memory"] / "caldera" / "t"
    memory.mkdir(parents=True)
    (memory / "memory.memsw.limit_in_bytes").write_text("")  # swap is accounted here
    folders = cgroups.create("t", LIMITS)
    assert folders == tuple(mounts[c] / "caldera" / "t" for c in ("memory", "pids", "cpu"))
    assert (memory / "memory.limit_in_bytes").read_text() == str(128 << 20)
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == str(128 << 20)
    assert (mounts["pids"] / "caldera" / "t" / "pids.max").read_text() == "64"
    cpu = mounts["cpu"] / "caldera" / "t"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "150000"
    assert (cpu / "cpu.shares").read_text() == "1536"


def test_v1_reads_an_oom_kill(tmp_path: Path) -> None:
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (folder / "memory.limit_in_bytes").write_text(f"{128 << 20}\n")
    (folder / "memory.max_usage_in_bytes").write_text(f"{128 << 20}\n")
    assert usage([folder]).oom_kills == 2


def test_no_limits_at_all_is_said_once_at_start() -> None:
    found, why = detect("off", None)
    assert found is None
    line = Isolation(privileged=False, cgroups_note=why).describe()
    assert "NO per-task memory, process or CPU limit is enforced (isolation.cgroups is off)" in (
        line
    )


@pytest.mark.parametrize(
    ("memory_mib", "queue", "want"),
    [(256, "a", 256 << 20), (0, "a", 96 << 20), (0, "b", 1 << 30)],
    ids=["request", "queue-default", "server-default"],
)
def test_a_tasks_memory_limit_is_its_request_else_its_queues_default(
    memory_mib: int, queue: str, want: int
) -> None:
    model = IsolationModel(task_memory="1Gi", queue_memory={"a": "96Mi"}, task_pids=100)
    isolation = Isolation(
        privileged=False,
        task_memory=model.task_memory,
        queue_memory=model.queue_memory,
        task_pids=model.task_pids,
    )
    assert isolation.task_limits(memory_mib, 0, queue) == TaskLimits(want, 100, None)


def test_an_oom_kill_in_the_exit_file_is_the_jobs_reason(tmp_path: Path) -> None:
    files = JobFiles(tmp_path, "j1")
    files.run.mkdir(parents=True)
    exit_file = files.exit_file(0, 0)
    exit_file.write_text(json.dumps({"exit_code": -9, "oom_kills": 1, "memory_limit": 1 << 30}))
    assert end_reason(files, 0, 0) == "out of memory (limit 1 GiB)"
    exit_file.write_text(json.dumps({"exit_code": 1, "oom_kills": 0}))
    assert end_reason(files, 0, 0) is None


def test_the_kernels_v2_hierarchy_is_used_only_where_it_offers_a_controller() -> None:
    """On this host's real unified hierarchy (CI's offers no controller: v1 limits there)."""
    root, why = find_cgroup_root()
    if root is None:
        pytest.skip(f"no cgroup v2 folder for tasks here: {why}")
    offered = set((root.parent / "cgroup.controllers").read_text().split())
    found, why = CgroupsV2.enable(root)
    if not offered & {"memory", "pids", "cpu"}:
        assert found is None and why.endswith("(it offers none)")
    elif found is not None:
        assert set(found.controllers) <= offered
