"""The database seam: SQLite under the data dir by default, PostgreSQL by URL.

The runtime writes through: every change to a job is committed before the side effect that
depends on it (a task row before its process is spawned, Releasing before the signal), so a
server killed at any instant restarts from a state that never lost an accepted job and never
forgot a GPU it had given. Reads for the API go straight to the tables.

One server per database: `lock_server()` takes a lock held in the database itself for the
server's lifetime (PostgreSQL: a session advisory lock keyed by the schema, on a connection
kept for it; SQLite: an exclusive `flock` on `DB-FILE.lock` beside the database file). A
second server on the same database, whatever its data dir, refuses to start.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import signal
import threading
import time
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
from sqlalchemy.exc import DisconnectionError

from caldera.core.fairshare import DecayedRecord
from caldera.errors import ServiceError
from caldera.service import new_rows
from caldera.service.db import (
    AuditRecord,
    EventRecord,
    FairShareRecord,
    JobRecord,
    QueueStateRecord,
    ThrottleRecord,
)

__all__ = ["Batch", "DatabaseBusy", "Store", "database_url_for"]

log = logging.getLogger("caldera.service")

_LOCK_CHECK = 5.0  # seconds between two checks that the PostgreSQL lock is still ours
_IDLE_PING = 1.0  # a pooled PostgreSQL connection idle this long is pinged before use

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def database_url_for(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'caldera.db'}"


class DatabaseBusy(ServiceError):
    """Another caldera server holds this database. The message is one line."""


class Batch:
    """Writes that commit together (one transaction)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def insert_jobs(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.connection.execute(insert(JobRecord).inline(), list(rows))

    def update_jobs(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            values = {k: v for k, v in row.items() if k != "id"}
            self.connection.execute(
                update(JobRecord).where(JobRecord.id == row["id"]).values(**values)
            )

    def events(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.connection.execute(insert(EventRecord).inline(), list(rows))

    def set_throttle(self, queue: str, job: str, since: float) -> None:
        self.connection.execute(delete(ThrottleRecord).where(ThrottleRecord.queue == queue))
        self.connection.execute(insert(ThrottleRecord).values(queue=queue, job=job, since=since))

    def drop_throttle(self, queue: str) -> None:
        self.connection.execute(delete(ThrottleRecord).where(ThrottleRecord.queue == queue))

    def set_queue_state(self, name: str, state: str) -> None:
        self.connection.execute(delete(QueueStateRecord).where(QueueStateRecord.name == name))
        self.connection.execute(insert(QueueStateRecord).values(name=name, state=state))

    def audit(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.connection.execute(insert(AuditRecord).inline(), list(rows))

    def keep_decayed_usage(self, record: DecayedRecord) -> None:
        """Replace the kept decayed usage (fair share over time) with `record`."""
        self.connection.execute(delete(FairShareRecord))
        queues = sorted(set(record.used) | set(record.held))
        rows = [
            {
                "queue": queue,
                "used": record.used.get(queue, 0.0),
                "held": record.held.get(queue, 0),
                "at": record.at,
            }
            for queue in queues
        ]
        if rows:
            self.connection.execute(insert(FairShareRecord), rows)


def _ping_when_idle(engine: Engine) -> None:
    """Pessimistic disconnect handling that costs nothing under load: a connection that sat
    in the pool longer than `_IDLE_PING` is pinged before it is handed out (and replaced if
    the server has gone, e.g. after a PostgreSQL restart), one in steady use is not.
    SQLAlchemy's `pool_pre_ping` pings at every checkout: a round trip per submission group,
    a fifth of the intake thread's time at 200 submissions/s. A connection that dies while
    in use fails its transaction; SQLAlchemy then replaces every pooled connection, and the
    submission path retries each submission alone (`Runtime._commit_each`)."""

    @event.listens_for(engine, "checkin")
    def _idle_from(dbapi_connection: Any, record: Any) -> None:
        record.info["caldera_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("caldera_idle_since")
        if since is None or time.monotonic() - since < _IDLE_PING:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise DisconnectionError(str(error)) from error
        if not alive:
            raise DisconnectionError("the database closed the connection")


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
            self.engine = create_engine(url, pool_size=8, max_overflow=8)
            _ping_when_idle(self.engine)
        # The same pool, each statement its own transaction (`append`).
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        # SQLite allows one writer at a time: writers queue on this lock.
        self._write_lock = threading.Lock()
        self._server_lock: Any = None  # the held lock: a file (SQLite) or a connection
        self.where = parsed.render_as_string(hide_password=True)
        self.sqlite_path: Path | None = None
        if self.is_sqlite and parsed.database not in (None, "", ":memory:"):
            self.sqlite_path = Path(str(parsed.database)).expanduser().resolve()

    # -- one server per database ---------------------------------------------------------------

    def lock_server(self) -> None:
        """Hold this database for this server until `close()`; DatabaseBusy if another has it."""
        busy = DatabaseBusy(
            f"another caldera server is using the database {self.where} "
            "(two servers would give GPUs twice)"
        )
        if self.is_sqlite:
            if self.sqlite_path is None:
                return  # an in-memory database belongs to this process alone
            path = self.sqlite_path.with_name(self.sqlite_path.name + ".lock")
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise busy from None
            self._server_lock = fd
            return
        connection = self.engine.connect()
        try:
            key = self._advisory_key(connection)
            got = connection.exec_driver_sql(f"SELECT pg_try_advisory_lock({key})").scalar()
            connection.commit()
        except Exception:
            connection.close()
            raise
        if not got:
            connection.close()
            raise busy
        self._server_lock = connection
        self._lock_key = key
        watch = threading.Thread(target=self._watch_lock, name="caldera-db-lock", daemon=True)
        watch.start()

    @staticmethod
    def _advisory_key(connection: Connection) -> int:
        """One key per schema: servers on other schemas of the same database are not rivals."""
        schema = connection.exec_driver_sql("SELECT current_schema()").scalar() or ""
        digest = hashlib.blake2b(f"caldera-server:{schema}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def _watch_lock(self) -> None:
        """A PostgreSQL lock lives as long as its connection: if the connection drops, take it
        again on a new one; if another server took it meanwhile, stop this server (SIGTERM to
        itself: the tasks keep running, as at any stop) rather than give GPUs twice."""
        while not self._closed.wait(_LOCK_CHECK):
            connection = self._server_lock
            try:
                connection.exec_driver_sql("SELECT 1")
                connection.commit()
                continue
            except Exception:
                with contextlib.suppress(Exception):
                    connection.close()
            try:
                connection = self.engine.connect()
                got = connection.exec_driver_sql(
                    f"SELECT pg_try_advisory_lock({self._lock_key})"
                ).scalar()
                connection.commit()
            except Exception:  # the database is away: keep trying
                continue
            if got:
                self._server_lock = connection
                log.warning("database connection lost and taken back; still the only server")
                continue
            connection.close()
            log.error("another caldera server took the database while ours was away; stopping")
            os.kill(os.getpid(), signal.SIGTERM)
            return

    def migrate(self) -> None:
        """Bring the schema to the newest revision (Alembic, shipped in the package)."""
        config = Config(str(_MIGRATIONS / "alembic.ini"))
        config.set_main_option("script_location", str(_MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def protect_files(self) -> None:
        """SQLite: the database and its WAL readable by this server's user only (0600)."""
        if self.sqlite_path is None:
            return
        for suffix in ("", "-wal", "-shm", ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(self.sqlite_path.with_name(self.sqlite_path.name + suffix), 0o600)

    def close(self) -> None:
        self._closed.set()
        held, self._server_lock = self._server_lock, None
        if isinstance(held, int):
            os.close(held)
        elif held is not None:
            # Close the connection itself, not back into the pool: the lock dies with it.
            with contextlib.suppress(Exception):
                held.invalidate()
                held.close()
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

    def append(
        self,
        jobs: Sequence[dict[str, Any]],
        events: Sequence[dict[str, Any]],
        audit: Sequence[dict[str, Any]],
    ) -> None:
        """Insert new job, event and audit rows together, all or none: the submission path.
        On PostgreSQL one statement that commits itself (`caldera.service.new_rows`: one
        round trip instead of six), else one transaction."""
        one = None if self.is_sqlite else new_rows.statement(jobs, events, audit)
        if one is not None:
            with self._autocommit.connect() as connection:
                connection.exec_driver_sql(*one)
            return
        with self.batch() as batch:
            batch.insert_jobs(jobs)
            batch.events(events)
            batch.audit(audit)

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

    def requeued_at(self, job_ids: Sequence[str]) -> dict[str, float]:
        """Each job's latest requeue time, for those requeued (where its current wait began)."""
        if not job_ids:
            return {}
        query = (
            select(EventRecord.job, func.max(EventRecord.t))
            .where(EventRecord.kind == "requeue", EventRecord.job.in_(list(job_ids)))
            .group_by(EventRecord.job)
        )
        with self.engine.connect() as connection:
            return {str(job): float(t) for job, t in connection.execute(query)}

    def active_jobs(self) -> list[dict[str, Any]]:
        """Jobs a restarted runtime must take back: not finished, or still holding tasks."""
        live = ("Held", "Pending", "Running", "Releasing")
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(JobRecord.__table__).order_by(JobRecord.submit_time, JobRecord.id)
            ).mappings()
            return [dict(r) for r in rows if r["state"] in live or r["tasks"]]

    def events(
        self, *, job: str | None = None, after: int = 0, limit: int = 1000, user: str | None = None
    ) -> list[dict[str, Any]]:
        """Events oldest first; `user`: only those of that user's jobs, chosen before `limit`
        (a page of everyone's events filtered afterwards may hold none of theirs)."""
        query = select(EventRecord.__table__).where(EventRecord.id > after)
        if job is not None:
            query = query.where(EventRecord.job == job)
        if user is not None:
            theirs = select(JobRecord.id).where(JobRecord.user == user)
            query = query.where(EventRecord.job.in_(theirs))
        query = query.order_by(EventRecord.id).limit(limit)
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(query).mappings()]

    def audit(
        self, *, after: int = 0, user: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        query = select(AuditRecord.__table__).where(AuditRecord.id > after)
        if user is not None:
            query = query.where(AuditRecord.user == user)
        query = query.order_by(AuditRecord.id).limit(limit)
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(query).mappings()]

    def throttles(self) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            rows = connection.execute(select(ThrottleRecord.__table__)).mappings()
            return [dict(row) for row in rows]

    def decayed_usage(self) -> DecayedRecord | None:
        """The decayed usage kept by `Batch.keep_decayed_usage` (None: none kept yet)."""
        with self.engine.connect() as connection:
            rows = list(connection.execute(select(FairShareRecord.__table__)).mappings())
        if not rows:
            return None
        return DecayedRecord(
            at=max(row["at"] for row in rows),
            used={row["queue"]: row["used"] for row in rows},
            held={row["queue"]: row["held"] for row in rows},
        )

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
            JobRecord.end_time,
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

    def count_waiting(self, user: str) -> int:
        """How many of `user`'s jobs are Pending or Held."""
        query = (
            select(func.count())
            .select_from(JobRecord)
            .where(JobRecord.user == user, JobRecord.state.in_(("Pending", "Held")))
        )
        with self.engine.connect() as connection:
            return int(connection.execute(query).scalar_one())

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
