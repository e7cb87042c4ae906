"""The local runtime as a service: `caldera serve` (DESIGN §7, §8).

- `config`   the service's YAML file: queues, tokens, policy
- `gpus`     this host's GPUs (nvidia-smi) or N virtual ones
- `db`, `store`, `migrations/`   the tables, the database seam, Alembic revisions
- `jobs`     a live job: request, tasks, work accounting, its `JobView`
- `launcher`, `runner`, `procs`  processes: spawn through the runner, identity, signals
- `runtime`  the loop that runs `caldera.core.run` and applies its decisions
- `submissions`, `polling`  a group of submissions taken live; a poll of the processes applied
- `api`, `metrics`, `server`     REST API, /metrics, wiring under uvicorn

Kept import-light: every task's runner imports this package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_service", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from caldera.service import server

        return getattr(server, name)
    raise AttributeError(f"module 'caldera.service' has no attribute {name!r}")
