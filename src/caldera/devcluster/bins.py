"""Where the dev cluster's binaries are: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK and kubectl, built from Go modules by `scripts/cluster-bins.sh` (`make
cluster-bins`) into a cache, or named outright by CALDERA_CLUSTER_BIN_DIR."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from caldera.devcluster.errors import DevClusterError

__all__ = ["COMPONENTS", "find_bins", "repo_script"]

# The control plane's processes, each a binary of the same name in the bins folder.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def repo_script(name: str) -> Path | None:
    """`scripts/<name>` of the caldera checkout this module runs from, None when it is not
    one (an installed wheel): where the pinned binaries are built and cached."""
    script = Path(__file__).resolve().parents[3] / "scripts" / name
    return script if script.is_file() else None


def find_bins(build: bool = False) -> Path:
    """The folder holding the control plane's binaries.

    `CALDERA_CLUSTER_BIN_DIR` names it outright; otherwise the repository's
    `scripts/cluster-bins.sh` says where the pinned versions are cached (building them first
    when `build`). Raises DevClusterError saying what is missing."""
    explicit = os.environ.get("CALDERA_CLUSTER_BIN_DIR")
    if explicit:
        folder = Path(explicit)
    else:
        script = repo_script("cluster-bins.sh")
        if script is None:
            raise DevClusterError(
                "no control-plane binaries: set CALDERA_CLUSTER_BIN_DIR "
                "(scripts/cluster-bins.sh builds them from a caldera checkout)"
            )
        if build and shutil.which("go") is None:
            raise DevClusterError(
                "no control-plane binaries, and Go is not installed to build them"
            )
        args = [str(script)] if build else [str(script), "--path"]
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["not built yet"])[-1]
            hint = "" if build else " (run `make cluster-bins`)"
            raise DevClusterError(f"no control-plane binaries: {last}{hint}")
        folder = Path(done.stdout.strip().splitlines()[-1])
    missing = [b for b in (*COMPONENTS, "kubectl") if not (folder / b).is_file()]
    if missing:
        raise DevClusterError(f"{folder} lacks {', '.join(missing)}")
    return folder
