"""README's "Kubernetes in five minutes" works as written (issue 34, item 6): the script it
shows, docs/examples/k8s-walkthrough.sh, run as is — a dev cluster with the real Volcano, `helm
install` of the chart with two teams' namespaces and rights, the controller as the chart's
ServiceAccount, two normal jobs, then a large job that preempts them and runs — in under five
minutes, its cluster stopped at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from caldera.devcluster.volcano import VolcanoBins

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "examples" / "k8s-walkthrough.sh"


def test_the_readme_walkthrough_reaches_a_preemption_in_five_minutes(
    cluster_bins: Path, volcano_bins: VolcanoBins, helm_bin: Path, tmp_path: Path
) -> None:
    readme = (ROOT / "README.md").read_text()
    for line in SCRIPT.read_text().splitlines():  # the README shows the script's commands
        if line and not line.startswith("#") and line.startswith(("caldera ", "helm ", "job ")):
            assert line in readme, f"README lacks: {line}"
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), str(cluster_bins), str(helm_bin.parent),
         os.environ["PATH"]]
    )  # fmt: skip
    began = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PATH": path, "CALDERA_DEV_DIR": str(tmp_path / "dev")},
        check=False,
    )  # fmt: skip
    took = time.monotonic() - began
    log = tmp_path / "dev" / "controller.log"
    tail = log.read_text()[-3000:] if log.exists() else ""
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{tail}"
    assert took < 300, f"the walk-through took {took:.0f} s"
    assert "pretrain condition met" in done.stdout
    assert done.stdout.count("preempt by team-a/pretrain") == 2, done.stdout[-2000:]
    # The script stopped its cluster: nothing of it is left running.
    left = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "dev")], capture_output=True, text=True, check=False
    )
    assert left.stdout.strip() == "", f"left running: {left.stdout}"
