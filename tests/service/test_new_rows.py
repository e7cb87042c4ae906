"""A submission group's rows in one PostgreSQL statement (`caldera.service.new_rows`): stored
exactly as the transaction of three inserts stores them, all or nothing with the failing row's
own error, and a group too large for one statement still stored (by the transaction)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from caldera.service import new_rows
from caldera.service.store import Store


@pytest.fixture
def store(postgres_url: str) -> Iterator[Store]:
    opened = Store(postgres_url)
    opened.migrate()
    try:
        yield opened
    finally:
        opened.close()


def _job(job_id: str, **given: Any) -> dict[str, Any]:
    """A job row as `LiveJob.row()` gives it, or with `given` replacing fields."""
    row = {
        "id": job_id, "name": job_id, "user": "alice", "queue": "team-a", "type": "normal",
        "state": "Pending", "submit_time": 1.5, "request": {"gpu": 1000, "env": {}},
        "tasks": [], "nomination": None, "evictions": 0, "throttled_once": False,
    }  # fmt: skip
    row.update(given)
    return row


def _event(job_id: str) -> dict[str, Any]:
    return {"t": 1.5, "kind": "submit", "job": job_id, "data": {"user": "alice"}}


def _audit(job_id: str) -> dict[str, Any]:
    return {
        "t": 1.25, "user": "alice", "client": "127.0.0.1", "method": "POST", "path": "/v1/jobs",
        "action": "submit", "target": job_id, "status": 201, "detail": {"gpus": 1.0},
    }  # fmt: skip


def _stored(store: Store, job_id: str) -> tuple[Any, ...]:
    """Everything stored of one job, ids numbered by the database left out; JSON as its
    text, so that a JSON null and SQL NULL differ."""
    with store.engine.connect() as connection:
        job = (
            connection.exec_driver_sql(
                "SELECT *, nomination::text AS nomination_text FROM jobs WHERE id = %s", (job_id,)
            )
            .mappings()
            .one()
        )
        events = connection.exec_driver_sql(
            "SELECT t, kind, job, data::text FROM events WHERE job = %s", (job_id,)
        ).all()
        audit = connection.exec_driver_sql(
            'SELECT t, "user", client, method, path, action, target, status, detail::text '
            "FROM audit WHERE target = %s",
            (job_id,),
        ).all()
    return dict(job), events, audit


def _by_transaction(store: Store, *rows: list[dict[str, Any]]) -> None:
    with store.batch() as batch:
        batch.insert_jobs(rows[0])
        batch.events(rows[1])
        batch.audit(rows[2])


def test_one_statement_stores_what_the_transaction_stores(store: Store) -> None:
    full = _job("j-full", nomination={"node": "n0"}, tasks=[{"pid": 7}])
    sparse = {"id": "j-sparse", "name": "s", "user": "bob", "queue": "team-a",
              "type": "normal", "state": "Held", "submit_time": 2.0, "request": {}}  # fmt: skip
    for job in (full, _job("j-plain"), sparse):
        twin = {**job, "id": job["id"] + "-twin"}
        assert new_rows.statement([job], [_event(job["id"])], [_audit(job["id"])]) is not None
        store.append([job], [_event(job["id"])], [_audit(job["id"])])
        _by_transaction(store, [twin], [_event(twin["id"])], [_audit(twin["id"])])
        ours, theirs = _stored(store, job["id"]), _stored(store, twin["id"])
        assert {**ours[0], "id": None} == {**theirs[0], "id": None}
        assert [(t, kind, data) for t, kind, _, data in ours[1]] == [
            (t, kind, data) for t, kind, _, data in theirs[1]
        ]
        assert [a[:6] + a[7:] for a in ours[2]] == [a[:6] + a[7:] for a in theirs[2]]


def test_a_refused_row_stores_nothing_and_says_why(store: Store) -> None:
    jobs = [_job("j-1"), _job("j-2")]
    events = [_event("j-1"), {**_event("j-2"), "kind": None}]
    with pytest.raises(IntegrityError, match="kind"):
        store.append(jobs, events, [_audit("j-1"), _audit("j-2")])
    assert store.jobs() == [] and store.events() == [] and store.audit() == []
    store.append(jobs[:1], events[:1], [_audit("j-1")])  # the pool's connection still serves
    assert [row["id"] for row in store.jobs()] == ["j-1"]


def test_a_group_too_large_for_one_statement_is_stored_by_a_transaction(store: Store) -> None:
    one = new_rows.statement([_job("j")], [], [])
    assert one is not None
    size = new_rows.MAX_PARAMETERS // len(one[1]) + 1  # jobs alone, one parameter too many
    jobs = [_job(f"j-{i}") for i in range(size)]
    events = [_event(job["id"]) for job in jobs]
    assert new_rows.statement(jobs, events, []) is None
    store.append(jobs, events, [])
    assert len(store.jobs()) == size and len(store.events(limit=size + 1)) == size


def test_nothing_to_insert_is_no_statement() -> None:
    assert new_rows.statement([], [], []) is None
