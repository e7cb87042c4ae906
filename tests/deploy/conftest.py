"""Fixtures for the deploy tests: Prometheus' tools from the Debian package `prometheus`
(scripts/apt-packages.txt), and one live `caldera serve` that has scheduled, throttled,
preempted and kept a critical job waiting, so every metric the rules and dashboard read has
samples."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from deploy_support import prometheus_tool
from service_support import ALICE, JOB_PYTHON, OPS, Server, wait_for

CRITICAL_SLO = 2.0  # seconds: short, so the live server has a critical job past it quickly

LIVE_CONFIG = {
    "queues": [
        {
            "name": "team-a",
            "weight": 1,
            "deserved": {"gpu": 4},
            "reclaimable": True,
        },
        {"name": "team-b", "weight": 1, "capability": {"gpu": 4}, "reclaimable": True},
        {"name": "ops", "weight": 1, "guarantee": {"gpu": 1}, "reclaimable": False},
    ],
    "tokens": [
        {"token": ALICE, "user": "alice", "queues": ["team-a"]},
        {"token": OPS, "user": "ops", "queues": ["*"], "critical": True, "admin": True},
    ],
    "policy": {"grace_period": 1, "throttle_timeout": 120, "slo": {"critical": CRITICAL_SLO}},
    "poll_interval": 0.05,
}


@pytest.fixture(scope="session")
def promtool() -> str:
    return prometheus_tool("promtool")


def _jobs(server: Server, state: str, queue: str) -> list[dict[str, object]]:
    return server.client(OPS).jobs(state=state, queue=queue)


def _sleeper(server: Server, queue: str, kind: str, gpus: int = 1, token: str = OPS) -> str:
    command = [JOB_PYTHON, "-c", "import time; time.sleep(600)"]
    return str(server.client(token).submit(command, queue, kind, gpus=gpus)["id"])


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server (8 virtual GPUs) that went through a preemption, a throttle episode and a
    cross-queue eviction by critical jobs, and now holds one critical job past its SLO."""
    root = tmp_path_factory.mktemp("live")
    server = Server(root, None, LIVE_CONFIG)
    try:
        server.start()
        # 8 normal jobs fill the GPUs; a large job of the same queue preempts them (its queue
        # goes into waiting mode while it waits for their room).
        for _ in range(8):
            _sleeper(server, "team-a", "normal", token=ALICE)
        wait_for("8 normal jobs running", lambda: len(_jobs(server, "Running", "team-a")) == 8)
        large = _sleeper(server, "team-a", "large-job", gpus=8)
        wait_for(
            "the large job to preempt and start",
            lambda: server.client(OPS).get(large)["state"] == "Running",
        )
        # Eight critical jobs preempt the large job; a ninth cannot start.
        for _ in range(8):
            _sleeper(server, "team-a", "critical")
        wait_for("8 critical jobs running", lambda: len(_jobs(server, "Running", "team-a")) == 8)
        _sleeper(server, "team-a", "critical")
        yield server
    finally:
        server.stop()
        server.kill_tasks()
        server.close_clients()


@pytest.fixture(scope="session")
def live_metrics(live_server: Server) -> str:
    """The live /metrics once the ninth critical job has waited past its SLO."""

    def late() -> str | None:
        text = httpx.get(live_server.url + "/metrics", timeout=5).text
        needle = 'caldera_waiting_past_slo_jobs{queue="team-a",type="critical"} 1.0'
        return text if needle in text else None

    return str(wait_for("a critical job past its SLO on /metrics", late, timeout=30))
