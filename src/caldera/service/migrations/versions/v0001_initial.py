"""Initial schema: jobs, events, throttles, queue_states.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("submit_time", sa.Float, nullable=False),
        sa.Column("first_start", sa.Float, nullable=True),
        sa.Column("start_time", sa.Float, nullable=True),
        sa.Column("end_time", sa.Float, nullable=True),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("tasks", sa.JSON, nullable=False),
        sa.Column("nomination", sa.JSON, nullable=True),
        sa.Column("running_since", sa.Float, nullable=True),
        sa.Column("work_base", sa.Float, nullable=False),
        sa.Column("saved_work", sa.Float, nullable=False),
        sa.Column("checkpoint_seen", sa.Float, nullable=True),
        sa.Column("checkpoint_step", sa.Integer, nullable=True),
        sa.Column("reported_progress", sa.Float, nullable=True),
        sa.Column("evictions", sa.Integer, nullable=False),
        sa.Column("last_evicted_at", sa.Float, nullable=True),
        sa.Column("evicted_for", sa.String(32), nullable=True),
        sa.Column("evict_reason", sa.String(16), nullable=True),
        sa.Column("signalled_at", sa.Float, nullable=True),
        sa.Column("work_at_signal", sa.Float, nullable=True),
        sa.Column("signal_gpu", sa.Integer, nullable=False),
        sa.Column("hold_reason", sa.String(16), nullable=True),
        sa.Column("hold_since", sa.Float, nullable=True),
        sa.Column("throttled_once", sa.Boolean, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("retries", sa.Integer, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("lost_gpu_seconds", sa.Float, nullable=False),
    )
    op.create_index("ix_jobs_user", "jobs", ["user"])
    op.create_index("ix_jobs_queue", "jobs", ["queue"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_submit_time", "jobs", ["submit_time"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("t", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("job", sa.String(32), nullable=True),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_kind", "events", ["kind"])
    op.create_index("ix_events_job_id", "events", ["job", "id"])
    op.create_table(
        "throttles",
        sa.Column("queue", sa.String(128), primary_key=True),
        sa.Column("job", sa.String(32), nullable=False),
        sa.Column("since", sa.Float, nullable=False),
    )
    op.create_table(
        "queue_states",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("queue_states")
    op.drop_table("throttles")
    op.drop_index("ix_events_job_id", "events")
    op.drop_index("ix_events_kind", "events")
    op.drop_table("events")
    for name in ("ix_jobs_submit_time", "ix_jobs_state", "ix_jobs_queue", "ix_jobs_user"):
        op.drop_index(name, "jobs")
    op.drop_table("jobs")
