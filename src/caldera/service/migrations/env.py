"""Alembic environment: migrations run on the connection the service hands in."""

from __future__ import annotations

from alembic import context

from caldera.service.db import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - the service always passes one
    raise RuntimeError("run migrations through caldera.service.store.Store.migrate")
context.configure(connection=connection, target_metadata=Base.metadata)
with context.begin_transaction():
    context.run_migrations()
