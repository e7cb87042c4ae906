"""fair_share: each queue's decayed GPU usage (fair share over time, issue 39) survives a
restart; without it a restarted service ordered idle room as if nobody had used anything.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fair_share",
        sa.Column("queue", sa.String(128), primary_key=True),
        sa.Column("used", sa.Float, nullable=False),
        sa.Column("held", sa.Integer, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("fair_share")
