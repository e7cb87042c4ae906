"""A private PostgreSQL server from Debian's binaries, for the tests and `caldera bench api`.

`scripts/system-deps.sh` installs the `postgresql` package (scripts/apt-packages.txt); its
programs live in /usr/lib/postgresql/VERSION/bin and no cluster needs to be running. The
server gets a fresh data dir in /tmp, a free port on 127.0.0.1, trust authentication for the
superuser `postgres`, and is stopped and removed at the end. initdb refuses to run as root:
as root the server runs as the `postgres` system user.

Durability: the test suite's server runs without fsync (a throwaway test database); the
benchmark's (`durable=True`) keeps PostgreSQL's production defaults (fsync, synchronous
commit, full page writes), so every commit it times waits for its WAL flush.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from caldera.ports import free_port

__all__ = ["PostgresServer", "find_binaries", "start_postgres"]


def find_binaries() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin holding initdb, pg_ctl and postgres."""
    found = []
    for bin_dir in Path("/usr/lib/postgresql").glob("*/bin"):
        if all((bin_dir / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            try:
                found.append((int(bin_dir.parent.name), bin_dir))
            except ValueError:
                continue
    return max(found)[1] if found else None


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path
    port: int
    user: str | None  # the OS account the server runs as (None: ours)
    durable: bool = False  # fsync, synchronous_commit, full_page_writes on (the defaults)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "test", options: str = "") -> str:
        """A SQLAlchemy URL for the superuser."""
        query = f"?options={options}" if options else ""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}{query}"

    def dsn(self, database: str = "test") -> str:
        """A libpq connection string for psycopg."""
        return f"host=127.0.0.1 port={self.port} dbname={database} user=postgres connect_timeout=5"

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            user=self.user,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
        )

    def _check(self, done: subprocess.CompletedProcess[str], what: str) -> None:
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"private PostgreSQL: {what} failed: {' | '.join(tail)}")

    def start(self) -> None:
        self._check(
            self._run(
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ),
            "initdb",
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.root} "
            "-c max_connections=300 -c shared_buffers=64MB"
        )
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._check(
            self._run(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.root / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ),
            "pg_ctl start",
        )
        self._create_database("test")

    def _create_database(self, name: str) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), autocommit=True) as admin:
                    admin.execute(f'CREATE DATABASE "{name}"')
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(bin_dir: Path, durable: bool = False) -> PostgresServer:
    """Start a private server; raises RuntimeError with one line if it cannot. `durable`:
    with PostgreSQL's default fsync and synchronous commit (for benchmarks)."""
    root = Path(tempfile.mkdtemp(prefix="caldera-pg-"))
    user: str | None = None
    if os.geteuid() == 0:
        user = "postgres"
        try:
            account = pwd.getpwnam(user)
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError("running as root and there is no `postgres` user") from None
        os.chown(root, account.pw_uid, account.pw_gid)
    os.chmod(root, 0o700)
    last: RuntimeError | None = None
    for _ in range(3):  # the free port may be taken between the probe and the start
        server = PostgresServer(bin_dir, root, free_port(), user, durable)
        try:
            server.start()
            return server
        except RuntimeError as error:
            last = error
            server._run(str(bin_dir / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "stop")
            shutil.rmtree(server.data, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    assert last is not None
    raise last
