"""PostgreSQL connections the server lost (a restart, a failover, an idle timeout): the store
pings a pooled connection only when it sat idle (`store._IDLE_PING`), not at every use as
`pool_pre_ping` did — a round trip per submission group. Whichever way a connection died,
nothing accepted is lost and the store works again without a restart of caldera."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from caldera.bench.postgres import PostgresServer
from caldera.service import store as store_module
from caldera.service.store import Store


@pytest.fixture
def store(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setattr(store_module, "_IDLE_PING", 0.2)
    opened = Store(postgres_url)
    opened.migrate()
    try:
        yield opened
    finally:
        opened.close()


def _job(job_id: str) -> dict[str, Any]:
    return {
        "id": job_id, "name": job_id, "user": "alice", "queue": "team-a", "type": "normal",
        "state": "pending", "submit_time": 1.0, "request": {},
    }  # fmt: skip


def _append(store: Store, job_id: str) -> None:
    event = {"t": 1.0, "kind": "submit", "job": job_id, "data": {}}
    store.append([_job(job_id)], [event], [])


def _drop_connections(postgres: PostgresServer) -> int:
    """What a PostgreSQL restart does to caldera's pooled connections: every backend but
    this one is terminated."""
    with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_connection_the_server_dropped_while_idle_is_replaced_before_use(
    store: Store, postgres: PostgresServer
) -> None:
    _append(store, "j-before")
    assert _drop_connections(postgres) >= 1
    time.sleep(0.3)  # idle longer than _IDLE_PING: the next checkout pings, finds it dead
    _append(store, "j-after")
    assert sorted(row["id"] for row in store.jobs()) == ["j-after", "j-before"]


def test_a_connection_dropped_in_steady_use_fails_one_transaction_then_the_pool_recovers(
    store: Store, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ping within `_IDLE_PING` of the last use: the dropped connection fails the
    transaction it is handed to (nothing of it is stored) and SQLAlchemy replaces the pool;
    the runtime then retries each submission of that group alone (`Runtime._commit_each`,
    tested in test_submit_commit.py)."""
    monkeypatch.setattr(store_module, "_IDLE_PING", 3600.0)
    _append(store, "j-before")
    assert _drop_connections(postgres) >= 1
    with pytest.raises(OperationalError):
        _append(store, "j-lost-connection")
    _append(store, "j-again")
    assert sorted(row["id"] for row in store.jobs()) == ["j-again", "j-before"]


def test_the_three_inserts_of_a_submission_group_commit_together_or_not_at_all(
    store: Store,
) -> None:
    """One transaction: a duplicate job id fails the whole group with the database's own
    words, and the connection serves the next group."""
    _append(store, "j-1")
    event = {"t": 1.0, "kind": "submit", "job": "j-2", "data": {}}
    with pytest.raises(Exception, match=r"(?i)duplicate|unique"):
        store.append([_job("j-2"), _job("j-1")], [event], [])
    assert [row["id"] for row in store.jobs()] == ["j-1"]
    assert store.count_events("submit") == 1
    _append(store, "j-3")
    assert sorted(row["id"] for row in store.jobs()) == ["j-1", "j-3"]
