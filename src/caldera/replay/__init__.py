"""Replays of a scenario on a real control plane, beside the simulator's prediction.

`compress` (time divided by a factor), `measure` (the seeds' metrics from what happened to
each job's tasks, for simulator runs and Kubernetes runs alike), `manifests` (what each
runtime's users submit), `kube` (the replay on a dev cluster) and `fidelity` (how far two runs
of one scenario are apart). The command is `caldera compare --runtime k8s`.
"""
