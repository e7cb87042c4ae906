"""`caldera serve`: wire the configuration, the database, this host's GPUs, the runtime and
the API together, and run them under uvicorn.

The data dir (default `$CALDERA_DATA_DIR`, else `$XDG_DATA_HOME/caldera`, else
`~/.local/share/caldera`) holds the SQLite database, each job's logs, checkpoint and control
folders, and `server.lock`, which keeps a second server off the same GPUs and state.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sqlalchemy.engine import make_url
from starlette.middleware import Middleware

from caldera.errors import ServiceError
from caldera.service.api.strangers import StrangerLimit
from caldera.service.audit import AuditLog, AuditWriter
from caldera.service.cgroups import detect as detect_cgroups
from caldera.service.config import ServiceConfig, default_config, load_config
from caldera.service.config import parse_config as parse_config_data
from caldera.service.gpus import FakeNvml, HostGPUs, local_node
from caldera.service.gpus.metrics import GpuCollector
from caldera.service.gpus.watch import GpuWatch
from caldera.service.isolation import Isolation, build_isolation
from caldera.service.launcher import ProcessLauncher
from caldera.service.metrics import ServiceMetrics
from caldera.service.proctree import find_cgroup_root
from caldera.service.runtime import Runtime
from caldera.service.store import DatabaseBusy, Store, database_url_for
from caldera.service.ui import mount_ui

__all__ = ["Service", "ServiceError", "build_service", "default_data_dir", "serve"]

log = logging.getLogger("caldera.service")


def default_data_dir() -> Path:
    explicit = os.environ.get("CALDERA_DATA_DIR")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:  # jobs run as other accounts: they must be able to reach their dirs
        return Path("/var/lib/caldera")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "caldera"


@dataclass
class Service:
    config: ServiceConfig
    store: Store
    runtime: Runtime
    metrics: ServiceMetrics
    gpus: HostGPUs
    data_dir: Path
    lock: IO[str]
    app: Any
    admin_token: str | None = None
    audit: Any = None
    isolation: Isolation | None = None

    def close(self) -> None:
        """Release the database and the data dir (the tasks keep running)."""
        if self.audit is not None:
            self.audit.close()
        self.store.close()
        self.lock.close()


def _lock(data_dir: Path) -> IO[str]:
    fd = os.open(data_dir / "server.lock", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    handle = open(fd, "a+", encoding="utf-8")  # noqa: SIM115 - held open
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ServiceError(
            f"another caldera server is using {data_dir} (two servers would give GPUs twice)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _default_token(data_dir: Path) -> str:
    path = data_dir / "admin-token"
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token


def build_service(
    config_path: Path | None,
    data_dir: Path | None = None,
    gpus: int | None = None,
    database_url: str | None = None,
    fake_gpus: str | None = None,
) -> Service:
    """Everything but the HTTP server. Raises ConfigError or ServiceError.
    `fake_gpus`: a fake NVML shape (or JSON file) instead of this host's GPUs."""
    from caldera.service.api import create_app  # FastAPI is only needed to serve

    data = (data_dir or default_data_dir()).expanduser().resolve()
    try:
        data.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ServiceError(f"cannot create data dir {data}: {error.strerror}") from None
    if gpus is not None and gpus < 0:
        raise ServiceError("--gpus must be 0 or more")
    if gpus is not None and fake_gpus is not None:
        raise ServiceError("--gpus and --fake-gpus cannot be used together")
    try:
        fake = FakeNvml.named(fake_gpus) if fake_gpus is not None else None
    except ValueError as error:
        raise ServiceError(str(error)) from None
    admin_token = None
    if config_path is None:
        admin_token = _default_token(data)
        config = parse_config_data(default_config(admin_token))
    else:
        config = load_config(config_path)
    isolation = _isolation(config, config_path, data)
    lock = _lock(data)
    store: Store | None = None
    try:
        store = Store(database_url or database_url_for(data))
        store.lock_server()
        store.migrate()
        store.protect_files()
    except Exception as error:
        if store is not None:
            store.close()
        lock.close()
        if isinstance(error, DatabaseBusy):
            raise ServiceError(str(error)) from None
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ServiceError(f"database: {first}") from None
    node, host = local_node(gpus, fake)
    watch = GpuWatch.for_host(host, config.gpu_health)
    metrics = ServiceMetrics()
    runtime = Runtime(
        config,
        store,
        data,
        (node,),
        launcher=ProcessLauncher(isolation),
        observe_cycle=metrics.observe_cycle,
        host=host,
        gpu_watch=watch,
    )
    metrics.attach(runtime)
    metrics.registry.register(GpuCollector(host, watch, runtime.lock))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            runtime.stop()

    app = create_app(runtime, metrics.render, lifespan, config.limits)
    app.state.isolation = isolation
    mount_ui(app, runtime, metrics.registry)
    audit = AuditWriter(store)
    # Inside Server-Timing (the time a request waits for its audit row is the server's
    # time), outside the request guard (a refused body is audited too).
    app.user_middleware.insert(1, Middleware(AuditLog, writer=audit, tokens=config.tokens))
    # Inside the audit log (its 429s are tallied there), outside everything that reads a body.
    strangers = Middleware(
        StrangerLimit,
        tokens=config.tokens,
        rate=config.limits.auth_failure_rate,
        burst=config.limits.auth_failure_burst,
    )
    app.user_middleware.insert(2, strangers)
    return Service(
        config, store, runtime, metrics, host, data, lock, app, admin_token, audit, isolation
    )


def _isolation(config: ServiceConfig, config_path: Path | None, data: Path) -> Isolation:
    """Who the jobs run as; the checks that keep the server's secrets from them."""
    model = config.isolation
    tracking = (None, "") if model.tracking == "subreaper" else find_cgroup_root()
    users = {who.user for who in config.tokens.values()}
    v2_root = tracking[0] if model.tracking != "subreaper" else None
    limits = detect_cgroups(model.cgroups, v2_root)
    isolation = build_isolation(model, config.logs, users, tracking, limits)
    if not isolation.privileged:
        os.chmod(data, 0o700)
        return isolation
    if config_path is not None and config_path.stat().st_mode & 0o077:
        raise ServiceError(
            f"{config_path} holds the tokens and other users may read it: chmod 600 it"
        )
    os.chmod(data, 0o711)
    for folder in data.parents:
        if not folder.stat().st_mode & 0o001:
            raise ServiceError(
                f"jobs cannot reach the data dir {data}: {folder} is not searchable by other "
                "users (chmod o+x it, or choose another --data-dir such as /var/lib/caldera)"
            )
    return isolation


def _check_address(host: str, port: int) -> None:
    """Fail with one line before anything starts if the address cannot be listened on."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ServiceError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise ServiceError(
                f"cannot listen on {host}:{port}: {error.strerror or error}"
            ) from None


def serve(
    config_path: Path | None,
    data_dir: Path | None,
    gpus: int | None,
    host: str,
    port: int,
    database_url: str | None,
    fake_gpus: str | None = None,
) -> None:
    import uvicorn

    _check_address(host, port)
    os.umask(0o077)  # everything the server writes is its own: database, logs, records
    service = build_service(config_path, data_dir, gpus, database_url, fake_gpus)
    logging.basicConfig(level=logging.INFO, format="caldera: %(message)s", stream=sys.stderr)
    where = "SQLite in the data dir" if service.store.is_sqlite else "PostgreSQL"
    sys.stderr.write(
        f"caldera: serving on http://{host}:{port} — {service.gpus.describe()}, "
        f"state in {where}, data dir {service.data_dir}\n"
        f"caldera: dashboard at http://{host}:{port}/ui (log in with your token)\n"
    )
    if service.isolation is not None:
        sys.stderr.write(f"caldera: {service.isolation.describe()}\n")
    if database_url and make_url(database_url).password:
        sys.stderr.write(
            "caldera: warning: the database password in --database-url is visible to every "
            "local user in the process list; use PGPASSWORD or ~/.pgpass instead\n"
        )
    if service.admin_token is not None:
        sys.stderr.write(
            f"caldera: no --config: queue 'default', admin token in "
            f"{service.data_dir / 'admin-token'}\n"
        )
    sys.stderr.flush()
    config = uvicorn.Config(
        service.app, host=host, port=port, log_level="warning", access_log=False
    )
    # Thousands of live jobs are long-lived objects: full collections over them stall every
    # request for tens of ms. Freeze what start-up made and collect the old generation rarely.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 1_000)
    # uvicorn shuts down on SIGTERM, then raises the signal again: with the default handler
    # the process would die there, before the audit tallies and the database are closed.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        uvicorn.Server(config).run()
    finally:
        service.close()


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
