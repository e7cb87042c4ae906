"""`caldera bench k8s`: caldera's controller on a real control plane (a dev cluster,
caldera.devcluster), a developer's tool beside the controller, not part of it.

- `scale`: the controller at scale — decision → bind, CPU and memory, API requests per
  cycle, recovery after a crash;
- `side`: `--modes`, the same workload through kube-scheduler, Volcano, caldera and
  caldera + Volcano side by side.

It imports the controller and the dev cluster; neither imports it
(tests/test_import_direction.py). Figures: docs/benchmarks.md.
"""
