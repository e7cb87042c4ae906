"""Departments in the service (issue 39): `/v1/queues` names each queue's parent, a
department holds what its teams hold, and `caldera queues` prints teams under their
department."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service_support import ALICE, JOB_PYTHON, OPS, Server, job_state, wait_for

TREE_CONFIG: dict[str, Any] = {
    "queues": [
        {"name": "product", "weight": 1, "deserved": {"gpu": 6}},
        {"name": "web", "parent": "product", "weight": 1},
        {"name": "search", "parent": "product", "weight": 1},
        {"name": "lab", "weight": 1},
    ],
    "tokens": [
        {"token": ALICE, "user": "alice", "queues": ["web", "search", "lab"]},
        {"token": OPS, "user": "ops", "queues": ["*"], "critical": True, "admin": True},
    ],
    "policy": {"grace_period": 2},
}


def test_a_department_holds_what_its_teams_hold_and_the_cli_shows_the_tree(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path, None, TREE_CONFIG).start()
    try:
        client = server.client(ALICE)
        job = client.submit([JOB_PYTHON, "-c", "import time; time.sleep(60)"], "web", gpus=2)
        wait_for("the job running", lambda: job_state(server, job["id"]) == "Running")
        queues = {q["name"]: q for q in client.queues()}
        assert queues["web"]["parent"] == "product" and queues["lab"]["parent"] is None
        assert queues["web"]["allocated_gpus"] == 2
        assert queues["product"]["allocated_gpus"] == 2  # its team's GPUs
        assert queues["lab"]["allocated_gpus"] == 0
        shown = server.cli("queues", token=ALICE).stdout
        words = [line.split() for line in shown.splitlines() if line.strip()]
        order = [" ".join(w[:2]) if w[0] == "└" else w[0] for w in words]
        at = order.index("product")
        assert order[at + 1 : at + 3] == ["└ web", "└ search"], shown
    finally:
        server.stop()
        server.kill_tasks()
        server.close_clients()
