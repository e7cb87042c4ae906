"""What a plain user reads through the API, and what /metrics exports from the start (issue 38
item 3): `/v1/events` picks a user's events before its `limit`, `/v1/cluster` shows a plain
user only their own jobs' ids, a requeued job's wait starts at its requeue, and every series
the deploy/ dashboard and rules read exists at zero on a fresh server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from service_support import ALICE, BOB, OPS, Server

from caldera.service.store import Store, database_url_for
from polling import wait_for

SQLITE = pytest.mark.parametrize("database_url", [None])  # what is tested is not the database


def _get(server: Server, path: str, token: str, **params: Any) -> Any:
    answer = httpx.get(
        server.url + path, params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


@SQLITE
def test_a_users_events_are_chosen_before_the_limit(make_server) -> None:
    server: Server = make_server()
    alice, bob = server.client(ALICE), server.client(BOB)
    mine = alice.submit(["sleep", "60"], queue="team-a", gpus=0, name="mine")
    wait_for("alice's job to start", lambda: alice.get(mine["id"])["state"] == "Running")
    last_seen = max(e["id"] for e in _get(server, "/v1/events", ALICE))
    for index in range(6):  # bob's events come after hers
        bob.submit(["sleep", "60"], queue="team-b", gpus=0, name=f"bob-{index}")
    alice.cancel(mine["id"])
    wait_for("alice's cancel", lambda: alice.get(mine["id"])["state"] == "Cancelled")
    page = _get(server, "/v1/events", ALICE, after=last_seen, limit=3)
    assert page and all(e["job"] == mine["id"] for e in page)
    assert "cancel" in {e["kind"] for e in page}


@SQLITE
def test_a_plain_user_sees_only_their_own_jobs_ids_in_the_cluster(make_server) -> None:
    server: Server = make_server()
    mine = server.client(ALICE).submit(["sleep", "60"], queue="team-a", gpus=1, name="mine")
    theirs = server.client(BOB).submit(["sleep", "60"], queue="team-b", gpus=1, name="theirs")

    def holders(token: str) -> set[str]:
        nodes = _get(server, "/v1/cluster", token)["nodes"]
        return {j for node in nodes for gpu in node["gpus"] for j in gpu["jobs"]}

    wait_for("both jobs to hold a GPU", lambda: len(holders(OPS)) == 2)
    assert holders(OPS) == {mine["id"], theirs["id"]}
    assert holders(ALICE) == {mine["id"]}
    assert holders(BOB) == {theirs["id"]}
    gpus = _get(server, "/v1/cluster", ALICE)["nodes"][0]["gpus"]
    assert sum(1 for gpu in gpus if gpu["free"] == 0) == 2  # her neighbour's GPU is still taken


def test_the_requeue_time_is_where_a_jobs_wait_starts(tmp_path) -> None:
    store = Store(database_url_for(tmp_path))
    store.migrate()
    try:
        with store.batch() as batch:
            batch.events(
                [
                    {"t": 10.0, "kind": "requeue", "job": "j-1", "data": {"reason": "evicted"}},
                    {"t": 30.0, "kind": "requeue", "job": "j-1", "data": {"reason": "evicted"}},
                    {"t": 20.0, "kind": "start", "job": "j-2", "data": {}},
                ]
            )
        assert store.requeued_at(["j-1", "j-2", "j-3"]) == {"j-1": 30.0}
        assert store.requeued_at([]) == {}
    finally:
        store.close()


SERIES = (
    "caldera_large_job_max_wait 0.0",
    'caldera_gpu_drained{gpu="0",model="',
    'caldera_gpu_xid_errors_total{gpu="0",model="',
)


@SQLITE
def test_every_series_the_dashboard_and_rules_read_exists_from_start(make_server) -> None:
    server: Server = make_server()
    text = httpx.get(server.url + "/metrics", timeout=30).text
    for series in SERIES:
        assert series in text, series
    drained = [line for line in text.splitlines() if line.startswith("caldera_gpu_drained{")]
    assert len(drained) == 8 and all(line.endswith(" 0.0") for line in drained)
    assert 'reason="",uuid="' in drained[0] or 'reason=""' in drained[0]
    xid79 = [line for line in text.splitlines() if 'xid="79"' in line]
    assert len(xid79) == 8 and all(line.endswith(" 0.0") for line in xid79)
