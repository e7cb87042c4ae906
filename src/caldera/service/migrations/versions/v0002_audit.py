"""The audit log: every state-changing request (who, what, when, outcome).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("t", sa.Float, nullable=False),
        sa.Column("user", sa.String(128), nullable=True),
        sa.Column("client", sa.String(64), nullable=True),
        sa.Column("method", sa.String(8), nullable=False),
        sa.Column("path", sa.String(512), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(255), nullable=True),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
    )
    op.create_index("ix_audit_t", "audit", ["t"])
    op.create_index("ix_audit_user", "audit", ["user"])


def downgrade() -> None:
    op.drop_index("ix_audit_user", "audit")
    op.drop_index("ix_audit_t", "audit")
    op.drop_table("audit")
