"""`caldera bench k8s` refuses what cannot run, in one line, before it starts a cluster."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from caldera.cli.main import app


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--nodes", "0"], "must be positive"),
        (["--nodes", "2", "--jobs", "16"], "must fit in the cluster"),  # 16 + 1 > 2 x 8
        (["--gpus-per-job", "9"], "must fit in the cluster"),  # no node has 9 GPUs
    ],
)
def test_bench_k8s_refuses_a_run_that_cannot_fit(args: list[str], want: str) -> None:
    result = CliRunner().invoke(app, ["bench", "k8s", *args])
    assert result.exit_code == 2, result.output
    assert want in result.output and "Traceback" not in result.output
