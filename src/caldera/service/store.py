"""The database seam: SQLite under the data dir by default, PostgreSQL by URL.

The runtime writes through: every change to a job is committed before the side effect that
depends on it (a task row before its process is spawned, Releasing before the signal), so a
server killed at any instant restarts from a state that never lost an accepted job and never
forgot a GPU it had given. Reads for the API go straight to the tables.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import make_url

from caldera.service.db import EventRecord, JobRecord, QueueStateRecord, ThrottleRecord

__all__ = ["Batch", "Store", "database_url_for"]

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def database_url_for(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'caldera.db'}"


class Batch:
    """Writes that commit together (one transaction)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def insert_job(self, row: dict[str, Any]) -> None:
        self.connection.execute(insert(JobRecord), [row])

    def update_jobs(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            values = {k: v for k, v in row.items() if k != "id"}
            self.connection.execute(
                update(JobRecord).where(JobRecord.id == row["id"]).values(**values)
            )

    def events(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.connection.execute(insert(EventRecord), list(rows))

    def set_throttle(self, queue: str, job: str, since: float) -> None:
        self.connection.execute(delete(ThrottleRecord).where(ThrottleRecord.queue == queue))
        self.connection.execute(insert(ThrottleRecord).values(queue=queue, job=job, since=since))

    def drop_throttle(self, queue: str) -> None:
        self.connection.execute(delete(ThrottleRecord).where(ThrottleRecord.queue == queue))

    def set_queue_state(self, name: str, state: str) -> None:
        self.connection.execute(delete(QueueStateRecord).where(QueueStateRecord.name == name))
        self.connection.execute(insert(QueueStateRecord).values(name=name, state=state))


class Store:
    """One engine; `batch()` for writes, plain methods for reads."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self._closed = threading.Event()
        self.url = url
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            # Pooled connections stay open: closing the last connection to a WAL database
            # checkpoints it (an fsync), which would cost every submission ~10 ms.
            self.engine: Engine = create_engine(
                url,
                connect_args={"check_same_thread": False, "timeout": 30},
                pool_size=8,
                max_overflow=8,
            )
            event.listen(self.engine, "connect", _sqlite_pragmas)
            self._checkpoints = threading.Thread(
                target=self._checkpoint_loop, name="caldera-wal-checkpoint", daemon=True
            )
            self._checkpoints.start()
        else:
            self.engine = create_engine(url, pool_size=8, max_overflow=8, pool_pre_ping=True)
        # SQLite allows one writer at a time: writers queue on this lock.
        self._write_lock = threading.Lock()

    def migrate(self) -> None:
        """Bring the schema to the newest revision (Alembic, shipped in the package)."""
        config = Config(str(_MIGRATIONS / "alembic.ini"))
        config.set_main_option("script_location", str(_MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def close(self) -> None:
        self._closed.set()
        self.engine.dispose()

    def _checkpoint_loop(self) -> None:
        """Move the WAL into the database every 2 s, off the request path: writers never
        checkpoint themselves (see `_sqlite_pragmas`), so no commit pays for an fsync."""
        while not self._closed.wait(2.0):
            try:
                with self.engine.connect() as connection:
                    connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception:  # a busy or closing database: try again next time
                continue

    @contextmanager
    def batch(self) -> Iterator[Batch]:
        if self.is_sqlite:
            # One writer at a time anyway: wait here rather than in SQLite's busy loop.
            with self._write_lock, self.engine.begin() as connection:
                yield Batch(connection)
        else:
            with self.engine.begin() as connection:
                yield Batch(connection)

    # -- reads -------------------------------------------------------------------------------

    def job(self, job_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as connection:
            row = connection.execute(select(JobRecord.__table__).where(JobRecord.id == job_id))
            found = row.mappings().first()
            return dict(found) if found is not None else None

    def jobs(
        self,
        *,
        user: str | None = None,
        states: Sequence[str] | None = None,
        queue: str | None = None,
        job_type: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[dict[str, Any]]:
        query = select(JobRecord.__table__)
        if user is not None:
            query = query.where(JobRecord.user == user)
        if states:
            query = query.where(JobRecord.state.in_(list(states)))
        if queue is not None:
            query = query.where(JobRecord.queue == queue)
        if job_type is not None:
            query = query.where(JobRecord.type == job_type)
        if newest_first:
            query = query.order_by(JobRecord.submit_time.desc(), JobRecord.id.desc())
        else:
            query = query.order_by(JobRecord.submit_time, JobRecord.id)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(query).mappings()]

    def active_jobs(self) -> list[dict[str, Any]]:
        """Jobs a restarted runtime must take back: not finished, or still holding tasks."""
        live = ("Held", "Pending", "Running", "Releasing")
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(JobRecord.__table__).order_by(JobRecord.submit_time, JobRecord.id)
            ).mappings()
            return [dict(r) for r in rows if r["state"] in live or r["tasks"]]

    def events(
        self, *, job: str | None = None, after: int = 0, limit: int = 1000
    ) -> list[dict[str, Any]]:
        query = select(EventRecord.__table__).where(EventRecord.id > after)
        if job is not None:
            query = query.where(EventRecord.job == job)
        query = query.order_by(EventRecord.id).limit(limit)
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(query).mappings()]

    def throttles(self) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            rows = connection.execute(select(ThrottleRecord.__table__)).mappings()
            return [dict(row) for row in rows]

    def queue_states(self) -> dict[str, str]:
        with self.engine.connect() as connection:
            rows = connection.execute(select(QueueStateRecord.__table__)).mappings()
            return {row["name"]: row["state"] for row in rows}

    def history(self) -> list[dict[str, Any]]:
        """What the §5 metrics need of every job, finished or not."""
        columns = (
            JobRecord.type,
            JobRecord.state,
            JobRecord.submit_time,
            JobRecord.first_start,
            JobRecord.evictions,
            JobRecord.lost_gpu_seconds,
        )
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(select(*columns)).mappings()]

    def events_of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(EventRecord.__table__).where(EventRecord.kind == kind)
            ).mappings()
            return [dict(row) for row in rows]

    def count_events(self, kind: str) -> int:
        with self.engine.connect() as connection:
            return int(
                connection.execute(
                    select(func.count()).select_from(EventRecord).where(EventRecord.kind == kind)
                ).scalar_one()
            )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL: readers never block the writer; NORMAL sync is durable across a process crash
    # (kill -9), which is the failure the service promises to survive.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.execute("PRAGMA journal_size_limit=67108864")  # the WAL shrinks back to 64 MiB
    cursor.close()
