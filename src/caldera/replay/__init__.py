"""Replays of a scenario on a real control plane, beside the simulator's prediction.

`compress` (time divided by a factor), `measure` (the seeds' metrics from what happened to
each job's tasks, for simulator runs and Kubernetes runs alike), `manifests` (what each
runtime's users submit), `kube` (the replay on a dev cluster: `modes` says what each mode runs,
`prepare` sets the cluster up, `controller` runs caldera's controller, `watch` follows the pods
and `pods` reads them and plays the jobs' part, `api` retries the API server) and `fidelity`
(how far two runs of one scenario are apart). The command is `caldera compare --runtime k8s`.
"""
