"""The audit log (issue 15 item 8): every state-changing request, whatever its outcome, is in
the database before its answer leaves: who, what, when, from where, the status."""

from __future__ import annotations

import time
from typing import Any

import httpx
from service_support import ALICE, BOB, OPS, Server

from caldera.service.store import Store, database_url_for


def audit_rows(server: Server) -> list[dict[str, Any]]:
    store = Store(server.database_url or database_url_for(server.data_dir))
    try:
        return store.audit()
    finally:
        store.close()


def test_every_state_changing_request_is_audited_before_it_is_answered(make_server) -> None:
    server = make_server()
    began = time.time()
    api = httpx.Client(base_url=server.url, timeout=30)

    def call(method: str, path: str, token: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return api.request(method, path, headers=headers, **kwargs)

    job = {"queue": "team-a", "command": ["sleep", "30"], "gpus": 1, "name": "audited",
           "env": {"SECRET": "hunter2"}}  # fmt: skip
    submitted = call("POST", "/v1/jobs", ALICE, json=job)
    assert submitted.status_code == 201
    job_id = submitted.json()["id"]
    assert call("POST", "/v1/jobs", BOB, json={**job, "queue": "ops"}).status_code == 403
    assert call("POST", "/v1/jobs", "not-a-token", json=job).status_code == 401
    assert call("GET", f"/v1/jobs/{job_id}", ALICE).status_code == 200  # a read: not audited
    assert call("POST", f"/v1/jobs/{job_id}/cancel", BOB).status_code == 403
    assert call("DELETE", f"/v1/jobs/{job_id}", ALICE).status_code == 200
    assert call("PATCH", "/v1/queues/team-b", OPS, json={"state": "Closing"}).status_code == 200
    api.close()

    rows = audit_rows(server)  # no wait: each row was committed before its answer
    seen = [(r["user"], r["action"], r["target"], r["status"]) for r in rows]
    assert seen == [
        ("alice", "submit", job_id, 201),
        ("bob", "submit", None, 403),
        (None, "submit", None, 401),
        ("bob", "cancel", job_id, 403),
        ("alice", "cancel", job_id, 200),
        ("ops", "queue_state", "team-b", 200),
    ]
    first, refused = rows[0], rows[1]
    assert first["detail"] == {
        "queue": "team-a", "type": "normal", "tasks": 1, "gpus": 1, "name": "audited"
    }  # fmt: skip
    assert "hunter2" not in str(rows) and "sleep" not in str(rows)  # never env or command
    assert "may not submit to queue 'ops'" in refused["detail"]["error"]
    assert rows[-1]["detail"] == {"state": "Closing"}
    assert all(r["client"] == "127.0.0.1" and began <= r["t"] <= time.time() for r in rows)
    assert all(r["method"] in ("POST", "DELETE", "PATCH") for r in rows)
    # Admins read it through the API; others may not.
    shown = server.client(OPS)._json("GET", "/v1/audit", params={"user": "alice"})
    assert [(r["action"], r["status"]) for r in shown] == [("submit", 201), ("cancel", 200)]
    refused = httpx.get(
        server.url + "/v1/audit", headers={"Authorization": f"Bearer {ALICE}"}, timeout=30
    )
    assert refused.status_code == 403
