"""Jobs never run as the server's user (issue 15 item 2), replaying the issue's attacks: as root
the server runs each job as its caldera user's OS account, with a clean environment and
private folders; a job cannot read or forge another job's files, read the server's config,
tokens or database, write outside its folders, or signal its runner or the server.

The end-to-end tests need root (to create accounts and drop privileges: skipped otherwise,
never under CI); the rules for building the isolation are checked as any user."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_support import (
    ALICE,
    BOB,
    OPS,
    ROOT,
    SANDBOX,
    Server,
    job_log,
    job_state,
    reachable_dir,
    wait_for,
)

from caldera.errors import ConfigError
from caldera.service import isolation as isolation_module
from caldera.service.isolation import IsolationModel, LogsModel, build_isolation


@pytest.fixture
def database_url() -> None:
    """SQLite only: what is checked here does not depend on the database."""
    return None


# Every variable a task may see: caldera's, the defaults for its account, the request's, and
# what `sh` itself adds.
ALLOWED = {
    "PATH", "LANG", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_",
    "CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "CALDERA_JOB_ID", "CALDERA_ATTEMPT", "CALDERA_CHECKPOINT_DIR", "CALDERA_CONTROL_DIR",
    "CALDERA_GRACE_PERIOD", "MINE",
}  # fmt: skip


def isolated_server(make_server: Any, accounts: dict[str, str]) -> Server:
    users = {"alice": accounts["alice"], "bob": accounts["bob"]}
    return make_server({"isolation": {"users": users, "sandbox_user": "nobody"}})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_jobs_run_as_their_users_account_with_a_clean_environment(
    make_server: Any, job_accounts: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server's own secrets, which the issue saw in every job.
    monkeypatch.setenv("PGPASSWORD", "server-secret-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "server-secret-2")
    server = isolated_server(make_server, job_accounts)
    alice = pwd.getpwnam(job_accounts["alice"])
    script = 'id -u; id -g; umask; pwd; env | cut -d= -f1 | sort | tr "\\n" " "; echo'
    job = server.client(ALICE).submit(
        ["sh", "-c", script], queue="team-a", tasks=2, gpus=1, env={"MINE": "1"}
    )
    wait_for("the job to succeed", lambda: job_state(server, job["id"]) == "Succeeded", 60)
    folder = server.data_dir / "jobs" / job["id"]
    for rank in (0, 1):  # privileges dropped for every task
        uid, gid, umask, cwd, names = server.client(OPS).logs(job["id"], rank=rank).splitlines()
        assert (int(uid), int(gid), umask) == (alice.pw_uid, alice.pw_gid, "0077")
        assert cwd == str(folder / "work")  # no workdir asked: the job's own folder
        assert set(names.split()) <= ALLOWED, set(names.split()) - ALLOWED
        assert "MINE" in names.split()
    everything = "".join(server.client(OPS).logs(job["id"], rank=r) for r in (0, 1))
    assert "PGPASSWORD" not in everything and "AWS_SECRET" not in everything
    # Folders: the job's own 0700 and its account's; the server's 0700 and root's.
    for name in ("checkpoint", "control", "work"):
        info = (folder / name).stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (alice.pw_uid, 0o700), name
    for name in ("logs", "run"):
        assert ((folder / name).stat().st_uid, mode(folder / name)) == (0, 0o700), name
    assert mode(folder) == 0o711 and mode(server.data_dir) == 0o711
    assert mode(folder / "logs" / "task-0.log") == 0o600
    for name in ("caldera.db", "caldera.db-wal", "admin-token", "server.lock"):
        if (server.data_dir / name).exists():
            assert mode(server.data_dir / name) == 0o600, name
    assert mode(server.root / "caldera.yaml") == 0o600


ATTACKS = r"""
try() {
  name=$1; shift
  if "$@" >/dev/null 2>&1; then echo "ALLOWED $name"; else echo "DENIED $name"; fi
}
own=$(dirname "$CALDERA_CHECKPOINT_DIR")
try read-log cat "$ALICE/logs/task-0.log"
try list-checkpoint ls "$ALICE/checkpoint"
try read-checkpoint cat "$ALICE/checkpoint/state"
try forge-control sh -c "echo '{\"progress\": 1.0}' > $ALICE/control/rank-0.json"
try read-config cat "$CONFIG"
try read-database cat "$DATA/caldera.db"
try read-admin-token cat "$DATA/admin-token"
try read-server-environ cat /proc/$SERVER/environ
try write-own-run-dir sh -c "echo x > $own/run/a1-r0.exit"
try write-own-log sh -c "echo x >> $own/logs/task-0.log"
try write-data-dir sh -c "echo x > $DATA/forged"
try kill-runner kill -9 $PPID
try kill-server kill -9 $SERVER
echo finished
"""


def test_a_job_cannot_reach_another_jobs_files_the_servers_secrets_or_the_server(
    make_server: Any, job_accounts: dict[str, str]
) -> None:
    server = isolated_server(make_server, job_accounts)
    victim = server.client(ALICE).submit(
        ["sh", "-c", 'echo alice-secret; echo state > "$CALDERA_CHECKPOINT_DIR/state"; sleep 120'],
        queue="team-a",
    )["id"]
    wait_for("alice's job to run", lambda: "alice-secret" in job_log(server, victim))
    assert server.process is not None
    env = {
        "ALICE": str(server.data_dir / "jobs" / victim),
        "CONFIG": str(server.root / "caldera.yaml"),
        "DATA": str(server.data_dir),
        "SERVER": str(server.process.pid),
    }
    attacker = server.client(BOB).submit(["sh", "-c", ATTACKS], queue="team-b", env=env)["id"]
    wait_for("the attacks to finish", lambda: "finished" in job_log(server, attacker), 60)
    results = dict(
        line.split(" ")[::-1] for line in job_log(server, attacker).splitlines() if " " in line
    )
    assert results and set(results.values()) == {"DENIED"}, results
    assert len(results) == 13
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
    assert server.process.poll() is None
    assert server.client(OPS).get(victim)["progress"] is None  # nothing was forged
    assert not (server.data_dir / "forged").exists()
    assert job_state(server, victim) == "Running"
    wait_for("bob's job to end", lambda: job_state(server, attacker) == "Succeeded")


# -- the rules, as any user --------------------------------------------------------------------


def build(model: dict[str, Any], users: set[str], root: bool, monkeypatch: Any) -> Any:
    monkeypatch.setattr(isolation_module.os, "geteuid", lambda: 0 if root else 4242)
    return build_isolation(IsolationModel(**model), LogsModel(), users, (None, "test"))


@pytest.mark.parametrize(
    ("model", "root", "want"),
    [
        ({}, True, "runs as root and jobs never do"),
        ({"users": {"alice": "root"}}, True, "'root' is root"),
        ({"sandbox_user": "no-such-account-xyz"}, True, "no OS account 'no-such-account-xyz'"),
        ({"sandbox_user": "nobody"}, False, "only a server running as root"),
        ({"tracking": "cgroup", "sandbox_user": "nobody"}, True, "cgroup is not available"),
    ],
    ids=["root-without-accounts", "root-account", "unknown", "not-root", "no-cgroup"],
)
def test_isolation_settings_that_would_run_jobs_unsafely_are_refused(
    model: dict[str, Any], root: bool, want: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError) as error:
        build(model, {"alice"}, root, monkeypatch)
    assert want in str(error.value) and "\n" not in str(error.value)


def test_a_server_that_is_not_root_says_its_jobs_share_its_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    isolation = build({}, {"alice"}, False, monkeypatch)
    assert not isolation.privileged and isolation.account("alice") is None
    line = isolation.describe()
    assert "jobs run as this server's own user" in line and "signal it" in line
    root = build({"users": {"alice": "nobody"}}, {"alice"}, True, monkeypatch)
    with pytest.raises(LookupError, match="no OS account for caldera user 'bob'"):
        root.account("bob")  # a user no token names: no account, no job
    account = root.account("alice")
    assert account is not None and account.name == "nobody"
    assert "never as root" in root.describe()


@pytest.mark.parametrize("database_url", [None])
def test_a_workdir_the_jobs_account_cannot_enter_is_refused_at_submit(
    make_server, tmp_path: Path
) -> None:
    """Run as root, `caldera submit` from root's home sends a workdir the jobs' account cannot
    enter: refused then, in one line, rather than a task that exits with 127."""
    if not ROOT:
        if os.environ.get("CI") == "true":
            pytest.fail("needs root (CI runs as root)")
        pytest.skip("needs root: a server that is not root runs jobs as itself")
    server = make_server()
    private = tmp_path / "private"  # pytest's folders are root's alone (0700)
    private.mkdir()
    job = {"queue": "team-a", "command": ["true"], "gpus": 0}
    answer = httpx.post(
        server.url + "/v1/jobs",
        json={**job, "workdir": str(private)},
        headers={"Authorization": f"Bearer {ALICE}"},
        timeout=30,
    )
    assert answer.status_code == 400
    reason = answer.json()["detail"]
    assert reason.startswith(f"workdir {private}: the jobs' account {SANDBOX} cannot enter ")
    assert "\n" not in reason
    reachable = reachable_dir("caldera-workdir-")
    assert server.client().submit(["true"], "team-a", gpus=0, workdir=str(reachable))["id"]
