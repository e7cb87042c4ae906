"""`caldera bench k8s` refuses what cannot run, in one line, before it starts a cluster."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from caldera.cli.main import app
from caldera.k8s.bench import finishing


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
