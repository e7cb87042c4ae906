"""jobs.preempt_failed_at: the core's back-off after a failed victim search survives a
restart (the Kubernetes controller always kept it; the service forgot it).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("preempt_failed_at", sa.Float, nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "preempt_failed_at")
