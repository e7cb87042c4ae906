"""`caldera bench api` measures the load it offers: its own server lets one user submit at
the benchmark's rate (the per-user limits would answer most of it 429), it fills the cluster
before the clock starts, and it says what failed. On SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import subprocess

from service_support import CALDERA


def test_bench_api_offers_its_whole_load_without_refusals(database_url: str | None) -> None:
    # 400 submissions in 2 s: over the default per-user bucket (200 + 50/s).
    argv = [CALDERA, "bench", "api", "--rate", "200", "--duration", "2", "--starts", "1",
            "--gpus", "2", "--workers", "8", "--json"]  # fmt: skip
    if database_url is not None:
        argv += ["--database-url", database_url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["errors"] == 0 and report["error_kinds"] == {}, report
    assert report["submitted"] == 400
    assert report["pending_at_end"] == 400  # the 2 filling jobs run, every load job waits
    assert 0 < report["submit_p50_ms"] <= report["submit_p99_ms"] <= report["submit_max_ms"]
    assert report["starts_measured"] == 1


def test_bench_api_refuses_a_private_postgres_beside_a_database_url() -> None:
    argv = [CALDERA, "bench", "api", "--private-postgres", "--database-url", "sqlite:///x.db"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
