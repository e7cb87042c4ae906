"""The real control plane for tests: one `DevCluster` per session, a fresh namespace per test.

The binaries come from `make cluster-bins` (scripts/cluster-bins.sh, cached). Without them
the tests skip with one line, except under CI=true, where they are built here if `make` did
not, and a failure to build fails the run. The real Volcano (`volcano_bins`: the cache
scripts/volcano-bins.sh fills, or the CALDERA_VOLCANO_* variables) follows the same rule.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from caldera_support import (  # noqa: F401 (one controller per session, for every module)
    CONTROLLER_USER,
    caldera,
    clean,
)
from real_support import NODES, wait_for

from caldera.devcluster import DevCluster, DevClusterError, find_bins
from caldera.devcluster.volcano import VolcanoBins, find_volcano
from caldera.k8s.cluster.client import load_api_client

CI = os.environ.get("CI") == "true"

k8s: Any = kubernetes


@pytest.fixture(scope="session")
def cluster_bins() -> Path:
    """The control plane's binaries (built here under CI=true)."""
    try:
        return find_bins(build=CI)
    except DevClusterError as error:
        if CI:
            pytest.fail(f"real control plane: {error}")
        if shutil.which("go") is None:
            pytest.skip("real control plane: Go is not installed (make cluster-bins needs it)")
        pytest.skip(f"real control plane: {error}")


@pytest.fixture(scope="session")
def volcano_bins(cluster_bins: Path) -> VolcanoBins:
    """The real Volcano: vc-scheduler, vc-controller-manager, vc-webhook-manager and its CRDs
    (built here under CI=true, where a Volcano missing fails the run instead of skipping)."""
    try:
        found = find_volcano(build=CI)
    except DevClusterError as error:
        if CI:
            pytest.fail(f"real Volcano: {error}")
        pytest.skip(f"real Volcano: {error}")
    if found is None:
        if CI:
            pytest.fail("real Volcano: not found (scripts/volcano-bins.sh is not in this checkout)")
        pytest.skip("real Volcano: not built (run make cluster-bins)")
    return found


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """Helm v4, built from Go modules by scripts/helm-bin.sh into ~/.cache/caldera (built here
    under CI=true; off CI a missing Helm skips)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "helm-bin.sh"
    found = subprocess.run([str(script), "--path"], capture_output=True, text=True, check=False)
    if found.returncode == 0:
        return Path(found.stdout.strip())
    if not CI:
        pytest.skip("Helm not built (make cluster-bins builds it)")
    built = subprocess.run([str(script)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(f"Helm: {built.stderr.strip().splitlines()[-1:]}")
    return Path(built.stdout.strip())


@pytest.fixture(scope="session")
def dev_cluster(
    tmp_path_factory: pytest.TempPathFactory, cluster_bins: Path
) -> Iterator[DevCluster]:
    folder = tmp_path_factory.mktemp("dev-cluster")
    cluster = DevCluster(
        folder=folder, bins=cluster_bins, nodes=NODES, audit_users=(CONTROLLER_USER,)
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def api_client(dev_cluster: DevCluster) -> Callable[[str], Any]:
    """`api_client(user)`: an ApiClient for admin or a user without rights; closed after."""
    opened: list[Any] = []

    def make(user: str = "admin") -> Any:
        client = load_api_client(str(dev_cluster.kubeconfig(user)))
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.close()


@pytest.fixture
def core(api_client: Callable[[str], Any]) -> Any:
    """CoreV1Api as admin."""
    return k8s.client.CoreV1Api(api_client("admin"))


@pytest.fixture
def namespace(core: Any) -> Iterator[str]:
    """A new namespace whose `default` service account exists (pods need it to be admitted)."""
    name = f"t-{secrets.token_hex(4)}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        f"the default service account in {name}",
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items
        ),
    )
    yield name
    core.delete_namespace(name)
