#!/usr/bin/env bash
# From nothing to a preemption on a real control plane on this machine, in a few minutes
# (README "Kubernetes in five minutes"; tests/k8s_real/test_real_walkthrough.py runs it).
# Needs caldera, kubectl and helm on PATH (make cluster-bins builds kubectl and helm;
# `caldera k8s dev-cluster start` prints the PATH line). Run from the repository's root.
# KEEP=1 leaves the cluster and the controller running afterwards.
set -euo pipefail
dir="${CALDERA_DEV_DIR:-$HOME/.cache/caldera/dev-cluster}"

# 1. A control plane with two 8-GPU KWOK nodes and the real Volcano.
caldera k8s dev-cluster start --volcano --nodes 2 --dir "$dir"
export KUBECONFIG="$(caldera k8s dev-cluster kubeconfig --dir "$dir")"
alice="$(caldera k8s dev-cluster kubeconfig --dir "$dir" --user alice)"

# 2. caldera from its chart: CRD, RBAC, admission policy, the teams' namespaces and rights.
helm install caldera deploy/helm/caldera --namespace caldera-system --create-namespace \
  --values docs/examples/dev-cluster-values.yaml --wait
kubectl -n caldera-system get configmap caldera-config -o jsonpath='{.data.caldera\.yaml}' \
  >"$dir/caldera.yaml"

# 3. The controller, here, as the chart's ServiceAccount (KWOK nodes run no containers).
token="$(kubectl -n caldera-system create token caldera-controller --duration=2h)"
kubectl config view --raw --minify >"$dir/controller.kubeconfig"
KUBECONFIG="$dir/controller.kubeconfig" kubectl config set-credentials sa --token="$token" >/dev/null
KUBECONFIG="$dir/controller.kubeconfig" kubectl config set-context --current --user=sa >/dev/null
caldera k8s run --kubeconfig "$dir/controller.kubeconfig" --config "$dir/caldera.yaml" \
  >"$dir/controller.log" 2>&1 &
controller=$!
finish() { if [ "${KEEP:-0}" != 1 ]; then kill "$controller" 2>/dev/null || true;
  caldera k8s dev-cluster stop --dir "$dir" >/dev/null; fi; }
trap finish EXIT

job() {  # NAME TYPE REPLICAS: a TrainingJob of REPLICAS pods of 8 GPUs, applied as alice
  kubectl --kubeconfig "$alice" -n team-a apply -f - <<YAML
apiVersion: caldera.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  type: $2
  tasks:
    - name: worker
      replicas: $3
      template:
        spec:
          containers:
            - {name: main, image: registry.example/train:v1, resources: {limits: {nvidia.com/gpu: 8}}}
YAML
}

# 4. Two normal jobs fill both nodes.
job research-1 normal 1
job research-2 normal 1
kubectl -n team-a wait --for=condition=Running trainingjob/research-1 trainingjob/research-2 --timeout=120s

# 5. A 16-GPU large job: it preempts both (grace period 5 s), then runs on their nodes.
job pretrain large-job 2
kubectl -n team-a wait --for=condition=Running trainingjob/pretrain --timeout=180s
kubectl -n team-a get trainingjobs
kubectl -n team-a get events --field-selector reason=Preempted -o custom-columns=JOB:.involvedObject.name,WHY:.message
