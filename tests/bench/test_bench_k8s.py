"""`caldera bench k8s` refuses what cannot run, in one line, before it starts a cluster."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from caldera.bench.kube.counts import controller_writes, is_write, per_pod, ratios
from caldera.bench.kube.scale import finishing
from caldera.bench.kube.workload import GANG_MAX, GANG_MIN, gang_sizes, workload
from caldera.cli.main import app
from caldera.devcluster.volcano import controllers_args


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--nodes", "0"], "must be positive"),
        (["--gpus-per-job", "9"], "must fit in one node"),  # no node has 9 GPUs
        (["--run-for", "0"], "run-for must be positive"),
    ],
)
def test_bench_k8s_refuses_a_run_that_cannot_fit(args: list[str], want: str) -> None:
    result = CliRunner().invoke(app, ["bench", "k8s", *args])
    assert result.exit_code == 2, result.output
    assert want in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("nodes", "gpus", "jobs", "per_job", "want"),
    [
        (1000, 8, 10_000, 1, 2_001),  # the size: 2,001 end to make room for the rest
        (1000, 8, 7_999, 1, 0),  # all fit, with one GPU left for the recovery's job
        (2, 8, 4, 3, 1),  # two 3-GPU jobs per node: 4 + 1 > 4
    ],
)
def test_more_jobs_than_fit_at_once_have_the_first_ones_make_room(
    nodes: int, gpus: int, jobs: int, per_job: int, want: int
) -> None:
    assert finishing(nodes, gpus, jobs, per_job) == want


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--modes", "caldera,slurm"], "a comma list of distinct modes"),
        (["--modes", "caldera,caldera"], "a comma list of distinct modes"),
        (["--modes", ","], "a comma list of distinct modes"),
        (["--modes", "caldera", "--gang-share", "1.5"], "between 0 and 1"),
        (["--modes", "caldera", "--nodes", "2", "--jobs", "17"], "every pod fits at once"),
        (["--modes", "caldera", "--nodes", "2", "--gangs", "3"], "room for every gang at once"),
        (["--modes", "caldera", "--gangs", "-1"], "--gangs must be 0 or more"),
        (["--modes", "volcano", "--volcano-controller-args", "qps=9"], "each --NAME=VALUE"),
        (["--modes", "volcano", "--volcano-controller-args", "'--v=2"], "closing quotation"),
    ],
)
def test_bench_k8s_side_by_side_refuses_bad_input_in_one_line(args: list[str], want: str) -> None:
    result = CliRunner().invoke(app, ["bench", "k8s", *args])
    assert result.exit_code == 2, result.output
    assert want in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("pods", "share", "seed"), [(800, 0.2, 1), (50, 0.4, 7), (40, 0.0, 1)])
def test_side_by_side_workload_has_its_share_of_gangs_of_8_to_64(
    pods: int, share: float, seed: int
) -> None:
    sizes = workload(pods, share, seed)
    gangs = [s for s in sizes if s > 1]
    assert sum(sizes) == pods
    assert all(GANG_MIN <= s <= GANG_MAX for s in gangs)
    # every gang pod is within the share, and what is left of it is less than one gang
    assert 0 <= int(pods * share) - sum(gangs) < GANG_MIN
    assert workload(pods, share, seed) == sizes  # seeded: every mode gets the same jobs
    if gangs and len(sizes) > len(gangs):
        assert sizes != sorted(sizes) and sizes != sorted(sizes, reverse=True)  # mixed


def test_requests_per_pod_leave_out_leases_heartbeats_and_non_resource_urls() -> None:
    counts = {
        "POST pods": 10,
        "POST pods/binding": 10,
        "PATCH pods/status": 10,
        "WATCH pods": 2,
        "PUT leases": 50,
        "PATCH nodes/status": 40,
        "GET ": 7,  # /metrics
    }
    assert per_pod(counts, 10) == (3.2, 3.0)
    assert is_write("APPLY trainingjobs/status") and not is_write("LIST pods")


def test_ratios_pair_caldera_with_what_it_stands_in_front_of() -> None:
    got = ratios({"kube-scheduler": 40.0, "caldera": 38.0, "volcano": 20.0})
    assert got == {"caldera/kube-scheduler": 0.95}  # caldera-volcano did not run
    assert ratios({"caldera-volcano": 25.0, "volcano": 20.0}) == {"caldera-volcano/volcano": 1.25}


def test_controller_writes_are_its_own_resources_and_the_events_beyond_the_runtime_behind() -> None:
    behind = {"POST pods": 10, "POST pods/binding": 10, "POST events": 25, "PUT podgroups": 20}
    caldera = {
        "POST trainingjobs": 10,  # the users' creates, not the controller's
        "POST pods": 10,
        "POST pods/binding": 10,
        "PATCH trainingjobs/status": 20,
        "PUT podgroups": 21,  # Volcano's own updates
        "POST events": 35,
        "PATCH events": 1,
        "PUT leases": 99,
    }
    got = controller_writes(caldera, behind)
    assert got == {
        "PATCH trainingjobs/status": 20,
        "POST pods": 10,
        "POST events": 10,
        "PATCH events": 1,
    }


def test_the_preemption_case_has_its_gangs_of_8_to_64_seeded() -> None:
    sizes = gang_sizes(200, 1)
    assert len(sizes) == 200 and all(GANG_MIN <= s <= GANG_MAX for s in sizes)
    assert gang_sizes(200, 1) == sizes and gang_sizes(200, 2) != sizes


def test_a_tuned_vc_controller_manager_gets_its_flags_after_the_defaults() -> None:
    args = controllers_args("admin.conf", ["--kube-api-qps=1000", "--worker-threads=8"])
    assert args[0] == "--kubeconfig=admin.conf"
    assert args[-2:] == ["--kube-api-qps=1000", "--worker-threads=8"]  # the last one wins
    assert controllers_args("admin.conf")[-1] == "--v=2"  # Volcano's own defaults otherwise
