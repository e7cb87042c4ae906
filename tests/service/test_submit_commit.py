"""A submission and its audit row are one transaction (issue 12 item 5): an accepted job's
audit row is committed with the job's row, never after it by another writer; a submission
whose commit fails leaves neither; in a group committed together, one bad submission fails
alone. On SQLite and on PostgreSQL (the `database_url` fixture)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_support import ALICE, reachable_dir, write_config

from caldera.errors import Rejected
from caldera.service.intake import Submission
from caldera.service.server import Service, build_service

CONFIG = {
    "queues": [{"name": "team-a", "weight": 1}, {"name": "closed", "weight": 1}],
    "tokens": [{"token": ALICE, "user": "alice", "queues": ["team-a", "closed"]}],
}
JOB = {"queue": "team-a", "command": ["sleep", "30"], "gpus": 1, "name": "together"}


@pytest.fixture
def service(tmp_path: Path, database_url: str | None) -> Iterator[Service]:
    config = write_config(tmp_path / "caldera.yaml", CONFIG)
    built = build_service(config, reachable_dir("caldera-commit-") / "data", 1, database_url)
    try:
        yield built
    finally:
        built.close()


def post(service: Service, jobs: list[dict[str, Any]]) -> list[httpx.Response]:
    """POST each job through the whole app (middleware included). The scheduling loop is not
    started, so nothing runs (submissions are admitted and committed in the caller's thread,
    by the same code as the intake thread's groups)."""

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(
            app=service.app, raise_app_exceptions=False, client=("127.0.0.1", 50000)
        )
        headers = {"Authorization": f"Bearer {ALICE}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://caldera") as api:
            return [await api.post("/v1/jobs", json=job, headers=headers) for job in jobs]

    return asyncio.run(send())


@pytest.fixture
def writer_rows(service: Service, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The rows the audit log's own writer thread was handed (it still commits them)."""
    handed: list[dict[str, Any]] = []
    write = service.audit.write

    def spy(row: dict[str, Any], done: Any) -> None:
        handed.append(row)
        write(row, done)

    monkeypatch.setattr(service.audit, "write", spy)
    return handed


def test_an_accepted_job_and_its_audit_row_are_committed_together(
    service: Service, writer_rows: list[dict[str, Any]]
) -> None:
    answer, refused = post(service, [JOB, {**JOB, "queue": "nope"}])
    assert answer.status_code == 201, answer.text
    assert refused.status_code == 400
    job_id = answer.json()["id"]
    rows = service.store.audit()
    assert [(r["action"], r["target"], r["status"]) for r in rows] == [
        ("submit", job_id, 201),
        ("submit", None, 400),
    ]
    assert rows[0]["user"] == "alice" and rows[0]["client"] == "127.0.0.1"
    assert rows[0]["detail"] == {
        "queue": "team-a", "type": "normal", "tasks": 1, "gpus": 1, "name": "together"
    }  # fmt: skip
    # The acceptance went in the submission's transaction; only the refusal took the writer.
    assert [(r["action"], r["status"]) for r in writer_rows] == [("submit", 400)]
    assert service.store.job(job_id) is not None


def test_a_submission_whose_commit_fails_leaves_neither_job_nor_acceptance(
    service: Service, writer_rows: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    append = service.store.append

    def unstorable_event(jobs: Any, events: Any, audit: Any) -> None:
        """The job's row is fine, its event one the database refuses (`kind` is NOT NULL):
        the commit fails with the job's row already handed to it."""
        append(jobs, [{**event, "kind": None} for event in events], audit)

    monkeypatch.setattr(service.store, "append", unstorable_event)
    (answer,) = post(service, [JOB])
    assert answer.status_code == 500
    assert not service.runtime.jobs
    assert service.store.jobs() == []
    rows = service.store.audit()
    assert [(r["action"], r["target"], r["status"]) for r in rows] == [("submit", None, 500)]
    assert [r["status"] for r in writer_rows] == [500]


def test_in_a_group_one_bad_submission_fails_alone(service: Service) -> None:
    runtime = service.runtime

    def audit_row(row: dict[str, Any], method: str | None = "POST") -> dict[str, Any]:
        return {
            "t": row["submit_time"], "user": "alice", "client": None, "method": method,
            "path": "/v1/jobs", "action": "submit", "target": row["id"], "status": 201,
            "detail": {},
        }  # fmt: skip

    good = [Submission(dict(_request()), "alice", audit=audit_row) for _ in range(2)]
    unstorable = Submission(_request(), "alice", audit=lambda row: audit_row(row, method=None))
    closed = Submission(_request(queue="closed"), "alice", audit=audit_row)
    runtime.set_queue_state("closed", _closed())
    group = [good[0], unstorable, closed, good[1]]
    runtime._accept(group)  # one group, as the intake thread hands it over

    ids = [s.future.result()["id"] for s in good]
    with pytest.raises(Exception, match=r"(?i)null"):
        unstorable.future.result()
    with pytest.raises(Rejected):
        closed.future.result()
    assert sorted(r["id"] for r in service.store.jobs()) == sorted(ids)
    assert sorted(r["target"] for r in service.store.audit()) == sorted(ids)
    assert set(runtime.jobs) == set(ids)


def _request(queue: str = "team-a") -> dict[str, Any]:
    from caldera.service.api.schemas import JobRequest

    normalised = JobRequest.model_validate({**JOB, "queue": queue}).normalised()
    normalised["trust_progress"] = False
    return normalised


def _closed() -> Any:
    from caldera.model import QueueState

    return QueueState.CLOSED
