"""The chart and the image against the real API server (issue 33).

- `helm template` for the four value sets of tests/deploy/test_helm_chart.py, each accepted by
  the real API server (`kubectl apply --dry-run=server`): every object validated by its real
  schema, the admission policy's CEL compiled. The Prometheus Operator's ServiceMonitor and
  PrometheusRule are left out of that check (their CRDs are not part of this control plane);
  promtool checks the rules they carry (tests/deploy).
- The OCI image `make image` builds (scripts/image.sh): unpacked with umoci and run as its
  non-root user with chroot — podman and crun do not run in this machine's sandbox (podman's
  crun cannot set RLIMIT_NPROC; crun 1.8 refuses the hybrid cgroup mount) — its `caldera
  --version`, and `caldera k8s run --dry-run` against this cluster as the chart's
  ServiceAccount.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from caldera_support import CHART, Cluster, helm, service_account_kubeconfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from test_helm_chart import VALUE_SETS

ROOT = Path(__file__).resolve().parents[2]
CI = os.environ.get("CI") == "true"
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_value_set_is_accepted_by_the_real_api_server(
    caldera: Cluster, tmp_path: Path, name: str
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUE_SETS[name]))
    rendered = helm(caldera, "template", "caldera", str(CHART), "-n", "caldera-system",
                    "--values", str(values))  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    checked = [d for d in docs if d["kind"] not in OPERATOR_KINDS]
    assert len(checked) >= 12
    done = caldera.kubectl(
        "admin", "apply", "--dry-run=server", "-f", "-",
        stdin="".join("---\n" + yaml.safe_dump(d) for d in checked),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("(server dry run)") == len(checked)


def _image(out: Path | None = None) -> tuple[Path, str]:
    """Build the image (its Debian + dependencies layer from the cache) into `out` (default
    build/image); (its OCI layout, tag)."""
    missing = [tool for tool in ("mmdebstrap", "umoci", "chroot") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        why = f"missing {missing}" if missing else "not root"
        if CI:
            pytest.fail(f"make image: {why} (scripts/system-deps.sh installs them as root)")
        pytest.skip(f"make image: {why}")
    done = subprocess.run(
        [str(ROOT / "scripts" / "image.sh")], capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHON": sys.executable,
             **({"CALDERA_IMAGE_OUT": str(out)} if out else {})}, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    archive = Path(done.stdout.strip().splitlines()[-1])
    tag = archive.name.removeprefix("caldera-").removesuffix(".oci.tar")
    return archive.parent / "layout", tag


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    layout, tag = _image()
    bundle = tmp_path_factory.mktemp("image") / "bundle"
    done = subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return bundle / "rootfs"


def test_the_image_is_reproducible(rootfs: Path, tmp_path: Path) -> None:
    """Built again from the same commit: the same digest, byte for byte the same archive."""
    layout, tag = _image(tmp_path / "again")
    first = ROOT / "build" / "image"
    assert (layout.parent / "digest").read_text() == (first / "digest").read_text()
    archive = f"caldera-{tag}.oci.tar"
    assert (layout.parent / archive).read_bytes() == (first / archive).read_bytes()


def _run_in(rootfs: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """A command of the image, as the image's config runs it: its user, env and entrypoint."""
    config: dict[str, Any] = json.loads((rootfs.parent / "config.json").read_text())
    process = config["process"]
    user = f"{process['user']['uid']}:{process['user']['gid']}"
    return subprocess.run(
        ["chroot", f"--userspec={user}", str(rootfs), "/usr/bin/env", "-i", *process["env"],
         *process["args"][:3], *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def test_the_image_runs_as_non_root_without_a_shell(rootfs: Path) -> None:
    config: dict[str, Any] = json.loads((rootfs.parent / "config.json").read_text())
    assert config["process"]["user"]["uid"] == 65532
    for shell in ("bin/sh", "bin/bash", "bin/dash", "usr/bin/sh", "usr/bin/bash", "usr/bin/dash"):
        assert not (rootfs / shell).exists(), shell
    done = _run_in(rootfs, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "caldera 0.1.0"


def test_the_image_runs_the_controller_dry_run_against_the_cluster(
    caldera: Cluster, rootfs: Path
) -> None:
    inside = rootfs / "home" / "caldera"
    kubeconfig = service_account_kubeconfig(
        caldera, "caldera-system", "caldera-controller", inside / "kubeconfig"
    )
    shutil.copy(caldera.dev.ca_file(), inside / "ca.crt")
    body = yaml.safe_load(kubeconfig.read_text())
    body["clusters"][0]["cluster"]["certificate-authority"] = "/home/caldera/ca.crt"
    kubeconfig.write_text(yaml.safe_dump(body))
    shutil.copy(caldera.config, inside / "caldera.yaml")
    for path in (kubeconfig, inside / "ca.crt", inside / "caldera.yaml"):
        os.chown(path, 65532, 65532)
    done = _run_in(
        rootfs, "k8s", "run", "--dry-run", "--kubeconfig", "/home/caldera/kubeconfig",
        "--config", "/home/caldera/caldera.yaml",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "would apply priorityclass critical-job" in done.stdout or "nothing to do" in done.stdout
