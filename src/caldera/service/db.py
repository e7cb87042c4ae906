"""The service's tables (SQLAlchemy 2 models). Alembic migrations in `migrations/` create them.

- `jobs`: one row per accepted job: what was asked (`request`, JSON) and every runtime fact
  the cycle needs to rebuild its `JobView` after a restart (state, work accounting, the tasks
  with their process ids, the nomination).
- `events`: the job history (submit, hold, release, start, evict, checkpoint, finish, fail,
  cancel, throttle_on, throttle_off), the same kinds as the simulator's output.
- `throttles`: queues in waiting mode (DESIGN §4.4).
- `queue_states`: Open/Closing/Closed set by an admin through the API, overriding the file.
- `fair_share`: each queue's decayed GPU usage (fair share over time, core/fairshare.py), so
  that a restart does not reset it: one row per queue, all kept at the same `at`.
- `audit`: every state-changing request: who, what, when, from where, and how it ended.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AuditRecord",
    "Base",
    "EventRecord",
    "FairShareRecord",
    "JobRecord",
    "QueueStateRecord",
    "ThrottleRecord",
]


class Base(DeclarativeBase):
    pass


class JobRecord(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    user: Mapped[str] = mapped_column(String(128), index=True)
    queue: Mapped[str] = mapped_column(String(128), index=True)
    type: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16), index=True)
    submit_time: Mapped[float] = mapped_column(Float, index=True)
    first_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    start_time: Mapped[float | None] = mapped_column(Float, nullable=True)  # latest start
    end_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    tasks: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    nomination: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    running_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    work_base: Mapped[float] = mapped_column(Float, default=0.0)
    saved_work: Mapped[float] = mapped_column(Float, default=0.0)
    checkpoint_seen: Mapped[float | None] = mapped_column(Float, nullable=True)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reported_progress: Mapped[float | None] = mapped_column(Float, nullable=True)
    evictions: Mapped[int] = mapped_column(Integer, default=0)
    last_evicted_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    evicted_for: Mapped[str | None] = mapped_column(String(32), nullable=True)
    evict_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    signalled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    work_at_signal: Mapped[float | None] = mapped_column(Float, nullable=True)
    signal_gpu: Mapped[int] = mapped_column(Integer, default=0)  # milli-GPUs that stopped
    hold_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    hold_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    preempt_failed_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # back-off
    throttled_once: Mapped[bool] = mapped_column(Boolean, default=False)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    retries: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    lost_gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class EventRecord(Base):
    __tablename__ = "events"
    __table_args__ = (Index("ix_events_job_id", "job", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    t: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    job: Mapped[str | None] = mapped_column(String(32), nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ThrottleRecord(Base):
    __tablename__ = "throttles"

    queue: Mapped[str] = mapped_column(String(128), primary_key=True)
    job: Mapped[str] = mapped_column(String(32))
    since: Mapped[float] = mapped_column(Float)


class QueueStateRecord(Base):
    __tablename__ = "queue_states"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))


class FairShareRecord(Base):
    __tablename__ = "fair_share"

    queue: Mapped[str] = mapped_column(String(128), primary_key=True)
    used: Mapped[float] = mapped_column(Float)  # decayed milli-GPU-seconds at `at`
    held: Mapped[int] = mapped_column(Integer)  # milli-GPUs held since `at`
    at: Mapped[float] = mapped_column(Float)


class AuditRecord(Base):
    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    t: Mapped[float] = mapped_column(Float, index=True)
    user: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    client: Mapped[str | None] = mapped_column(String(64), nullable=True)
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(512))
    action: Mapped[str] = mapped_column(String(32))
    target: Mapped[str | None] = mapped_column(String(255), nullable=True)
    status: Mapped[int] = mapped_column(Integer)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
