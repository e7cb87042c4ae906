"""No tenant can crash, stall or cheat the controller (issue 34), on the real control plane:
the manifests the issue found (an unquoted `cpu: 4`, a sidecar asking 7 GPUs, an unknown
`template.spec.x-deep`, `gpus: 1e306`, `cpu: "1e308"`, a template nested 1,100 levels)
submitted by one team while another team's job runs; a sidecar's GPUs counted; a pod's
`caldera.io/progress=nan` ignored with a Warning.

Before issue 34, each of the first five crashed the controller on every restart while the
job existed, and the nested one killed its namespace's watcher (no new job there was ever
admitted); the sidecar's job was counted as 1 GPU, so the next 7-GPU job was pinned to its
full node and never bound; `progress=nan` made every later status write fail."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import kubernetes
from caldera_support import Cluster, training_job
from hostile_support import alive, event_messages, nested_json
from real_support import wait_for

from caldera.k8s import names
from caldera.k8s.cluster.wirejson import loads
from caldera.trainingjob_api import CHECKPOINT, GROUP, MANAGED, PLURAL, PROGRESS, VERSION

k8s: Any = kubernetes


def _status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """A TrainingJob's status, read the way the controller reads (the client's own decoder
    recurses, and a nested template is past its depth)."""
    custom = k8s.client.CustomObjectsApi(cluster.client())
    response = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
    )
    return dict(loads(response.data).get("status") or {})


def _gpu_container(name: str, gpus: int, **requests: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": gpus}}
    if requests:
        resources["requests"] = requests
    return {"name": name, "image": "registry.example/train:v1", "resources": resources}


def _with_template(name: str, pod_spec: dict[str, Any], **task: Any) -> dict[str, Any]:
    job = training_job(name)
    job["spec"]["tasks"][0]["template"] = {"spec": pod_spec}
    job["spec"]["tasks"][0].update(task)
    return job


def test_hostile_manifests_neither_crash_nor_stall_the_controller(clean: Cluster) -> None:
    """bob submits the issue's manifests in team-a while alice's job runs there. The valid
    ones are admitted and counted as Kubernetes counts them; the others are Rejected with a
    one-line reason and an Event (or refused by the CRD's schema at apply). The controller
    stays up, alice's pod is never touched, and her next job in team-a is admitted and runs
    (the nested template used to kill team-a's watcher)."""
    assert clean.apply("alice", "team-a", training_job("steady")).returncode == 0
    clean.wait("team-a", "steady", "Running")
    (steady_pod,) = clean.running_pods("team-a", "steady")

    admitted = {
        # Unquoted quantities: an int CPU and an int memory (bytes), read as Kubernetes does.
        "cpu4": _with_template(
            "cpu4", {"containers": [_gpu_container("main", 1, cpu=4, memory=1073741824)]}
        ),
        # A sidecar with GPUs of its own: the task asks 1 + 7 = 8.
        "sidecar": _with_template(
            "sidecar",
            {"containers": [_gpu_container("main", 1), _gpu_container("side", 7)]},
        ),
    }
    rejected = {
        "xdeep": _with_template(
            "xdeep", {"containers": [_gpu_container("main", 8)], "x-deep": {"a": {"b": 1}}}
        ),
        "hugegpus": _with_template("hugegpus", {"containers": [{"name": "main"}]}, gpus=1e306),
        "hugecpu": _with_template(
            "hugecpu", {"containers": [_gpu_container("main", 8, cpu="1e308")]}
        ),
    }
    for name, job in {**admitted, **rejected}.items():
        done = clean.apply("bob", "team-a", job)
        if done.returncode != 0:  # the CRD's schema refused it at the door: as good
            assert name in rejected, f"{name}: {done.stderr}"
            rejected.pop(name)
    nested = clean.kubectl(
        "bob", "-n", "team-a", "create", "-f", "-", stdin=nested_json("nested", 1100)
    )
    assert nested.returncode == 0, nested.stderr
    rejected["nested"] = {}

    for name in rejected:
        wait_for(
            f"{name} Rejected",
            lambda name=name: _status(clean, "team-a", name).get("state") == "Rejected",
            timeout=60,
        )
        reason = _status(clean, "team-a", name)["reason"]
        assert reason and "\n" not in reason and len(reason) < 300, reason
        wait_for(
            f"{name}'s Rejected event",
            lambda n=name: event_messages(clean, "team-a", n, "Rejected"),
        )
    assert "nested deeper than" in _status(clean, "team-a", "nested")["reason"]
    assert "x-deep" in clean.status("team-a", "xdeep")["reason"]
    for name in admitted:
        clean.wait("team-a", name, "Running")
    assert clean.status("team-a", "sidecar")["gpus"] == "8"

    alive(clean)
    assert clean.state("team-a", "steady") == "Running"
    (still,) = clean.running_pods("team-a", "steady")
    assert still.metadata.uid == steady_pod.metadata.uid

    assert clean.apply("alice", "team-a", training_job("newcomer")).returncode == 0
    clean.wait("team-a", "newcomer", "Running", timeout=60)
    alive(clean)


def test_a_sidecars_gpus_are_counted_so_the_next_job_is_not_pinned_to_a_full_node(
    clean: Cluster,
) -> None:
    """Container 0 asks 1 GPU, a sidecar 7: the node gives the pod 8. A 7-GPU job submitted
    next must go to an empty node; counted as 1, it was pinned to the full one and never
    bound (re-pinned there after every start timeout)."""
    sidecar = _with_template(
        "sidecar", {"containers": [_gpu_container("main", 1), _gpu_container("side", 7)]}
    )
    assert clean.apply("bob", "team-a", sidecar).returncode == 0
    clean.wait("team-a", "sidecar", "Running")
    (pod,) = clean.running_pods("team-a", "sidecar")
    full = pod.spec.node_name
    assert clean.apply("alice", "team-a", training_job("seven", gpus=7)).returncode == 0
    clean.wait("team-a", "seven", "Running", timeout=60)
    (seven,) = clean.running_pods("team-a", "seven")
    assert seven.spec.node_name != full


def test_a_pods_nan_progress_is_ignored_with_a_warning(clean: Cluster) -> None:
    """`caldera.io/progress=nan` on the job's own pod (its service account may patch pods
    for progress reports): ignored, said once as a BadReport Warning; the status keeps
    being written (a later good report shows in it)."""
    assert clean.apply("bob", "team-a", training_job("liar")).returncode == 0
    clean.wait("team-a", "liar", "Running")
    (pod,) = clean.running_pods("team-a", "liar")
    name = pod.metadata.name
    done = clean.kubectl(
        "admin", "-n", "team-a", "annotate", "--overwrite", f"pod/{name}", f"{PROGRESS}=nan"
    )
    assert done.returncode == 0, done.stderr
    wait_for("the BadReport event", lambda: event_messages(clean, "team-a", "liar", "BadReport"))
    done = clean.kubectl(
        "admin", "-n", "team-a", "annotate", "--overwrite", f"pod/{name}", f"{PROGRESS}=0.25"
    )
    assert done.returncode == 0, done.stderr

    def reported() -> Any:
        return (clean.status("team-a", "liar").get("controller") or {}).get("reported_progress")

    wait_for("progress 0.25 in the status", lambda: reported() == 0.25)
    alive(clean)


def test_a_pod_that_loses_its_managed_label_stays_its_jobs(clean: Cluster) -> None:
    """Removing `caldera.io/managed` from a running pod made caldera count its task gone and
    start attempt 2 beside it (16 GPUs for an 8-GPU job, the old pod beyond reach). It is
    still the job's by its ownerReference: one attempt, one pod, and deleting the job
    stops it."""
    assert clean.apply("bob", "team-a", training_job("unlabelled")).returncode == 0
    clean.wait("team-a", "unlabelled", "Running")
    (pod,) = clean.running_pods("team-a", "unlabelled")
    done = clean.kubectl(
        "admin", "-n", "team-a", "label", f"pod/{pod.metadata.name}", f"{MANAGED}-"
    )
    assert done.returncode == 0, done.stderr
    core = k8s.client.CoreV1Api(clean.client())

    def owned() -> list[Any]:
        return [
            p
            for p in core.list_namespaced_pod("team-a").items
            if any(ref.uid == clean.job("team-a", "unlabelled")["metadata"]["uid"]
                   for ref in p.metadata.owner_references or [])
        ]  # fmt: skip

    for _ in range(10):  # 20 s: the controller steps every 2 s (resync) at least
        status = clean.status("team-a", "unlabelled")
        assert status["attempts"] == 1 and status["state"] == "Running", status
        assert [p.metadata.name for p in owned()] == [pod.metadata.name]
        time.sleep(2)
    alive(clean)
    uid = clean.job("team-a", "unlabelled")["metadata"]["uid"]
    clean.kubectl("bob", "-n", "team-a", "delete", PLURAL, "unlabelled", "--wait=false")
    wait_for(
        "the unlabelled pod gone with its job",
        lambda: (
            not [
                p
                for p in core.list_namespaced_pod("team-a").items
                if any(ref.uid == uid for ref in p.metadata.owner_references or [])
            ]
        ),
        timeout=60,
    )


def test_a_pods_service_account_may_report_progress_but_not_change_ownership(
    clean: Cluster, tmp_path: Path
) -> None:
    """The docs grant the job's service account `patch pods` for its reports, which let it
    also remove `caldera.io/managed` or the ownerReference from its own pod. The report
    policy (rendered with the admission policy) lets it change only the progress and
    checkpoint annotations."""
    from caldera_support import service_account_kubeconfig

    for args in (
        ("create", "role", "report-progress", "--verb=get,patch", "--resource=pods"),
        ("create", "rolebinding", "report-progress", "--role=report-progress",
         "--serviceaccount=team-a:default"),
    ):  # fmt: skip
        done = clean.kubectl("admin", "-n", "team-a", *args)
        assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
    assert clean.apply("bob", "team-a", training_job("reporter")).returncode == 0
    clean.wait("team-a", "reporter", "Running")
    (pod,) = clean.running_pods("team-a", "reporter")
    config = service_account_kubeconfig(clean, "team-a", "default", tmp_path / "job.kubeconfig")
    kubectl = Path(clean.dev._state["bins"]) / "kubectl"

    def as_job(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl), "--kubeconfig", str(config), "-n", "team-a", *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    target = f"pod/{pod.metadata.name}"
    reported = as_job("annotate", "--overwrite", target, f"{PROGRESS}=0.5")
    assert reported.returncode == 0, reported.stderr
    checkpoint = json.dumps({"time": int(time.time())})
    reported = as_job("annotate", "--overwrite", target, f"{CHECKPOINT}={checkpoint}")
    assert reported.returncode == 0, reported.stderr
    unlabelled = as_job("label", target, f"{MANAGED}-")
    assert unlabelled.returncode != 0 and "not its labels" in unlabelled.stderr, unlabelled
    orphaned = as_job(
        "patch", target, "--type=json",
        "-p", '[{"op": "remove", "path": "/metadata/ownerReferences"}]',
    )  # fmt: skip
    assert orphaned.returncode != 0 and "ownerReferences" in orphaned.stderr, orphaned
    other = as_job("annotate", "--overwrite", target, f"{names.GROUP_NAME}=elsewhere")
    assert other.returncode != 0 and "other annotations" in other.stderr, other
    core = k8s.client.CoreV1Api(clean.client())
    now = core.read_namespaced_pod(pod.metadata.name, "team-a").metadata
    assert now.labels[MANAGED] == "true" and now.owner_references
    assert now.annotations[PROGRESS] == "0.5"
    alive(clean)


def test_a_waiting_job_says_why_and_a_started_one_is_not_running_before_its_pods(
    clean: Cluster,
) -> None:
    """A job waiting for room had an empty reason and no Event; a job whose pods do not run
    (a missing PVC, an image that never pulls) showed STATE Running. Now: `status.reason` and a
    Waiting Event say why it waits, and the State column (`status.phase`) reads Starting
    while the pods are Pending."""
    assert clean.apply("alice", "team-a", training_job("gang", replicas=3)).returncode == 0
    clean.wait("team-a", "gang", "Running")
    # Bound, never running (KWOK holds it in ImagePullBackOff), as a pod waiting for a volume.
    stuck = training_job("stuck", annotations={"caldera.io/kwok-image-pull": "fail"})
    assert clean.apply("bob", "team-a", stuck).returncode == 0
    wait_for("stuck Starting", lambda: clean.status("team-a", "stuck").get("phase") == "Starting")
    assert clean.status("team-a", "stuck")["state"] == "Running"  # the lifecycle's own
    printed = clean.kubectl("admin", "-n", "team-a", "get", PLURAL, "stuck").stdout
    (row,) = [line for line in printed.splitlines() if line.startswith("stuck ")]
    assert " Starting " in row and " Running " not in row, printed
    assert clean.apply("bob", "team-a", training_job("late")).returncode == 0
    wait_for("late's Waiting event", lambda: event_messages(clean, "team-a", "late", "Waiting"))
    status = clean.status("team-a", "late")
    assert status["state"] == "Pending" and status["reason"].startswith("waiting: "), status
    found = clean.condition("team-a", "late", "Waiting")
    assert found is not None and found[0] == "True", found


def test_a_start_that_keeps_timing_out_backs_off_and_says_so(clean: Cluster) -> None:
    """A job whose PVC is missing restarted every bind timeout forever with a StartTimeout
    that did not say it would go on. Now the second give-up in a row for the same reason
    holds it before the next try, and status.reason and the Event say so, with the
    scheduler's reason."""
    for args in (
        ("create", "role", "get-data", "--verb=get", "--resource=persistentvolumeclaims",
         "--resource-name=data"),
        ("create", "rolebinding", "get-data", "--role=get-data", "--user=bob"),
    ):  # fmt: skip
        done = clean.kubectl("admin", "-n", "team-a", *args)
        assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
    pod_spec = _pod_spec_with(
        volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    )
    _policy_settled(clean)
    assert clean.apply("bob", "team-a", _with_template("noclaim", pod_spec)).returncode == 0
    wait_for(
        "noclaim held after its second StartTimeout",
        lambda: clean.state("team-a", "noclaim") == "Held",
        timeout=150,
    )
    reason = clean.status("team-a", "noclaim")["reason"]
    assert reason.startswith("StartTimeout 2nd time: "), reason
    assert 'persistentvolumeclaim "data" not found' in reason and "next try in " in reason, reason
    said = event_messages(clean, "team-a", "noclaim", "StartTimeout")
    assert any("StartTimeout 2nd time: next try in 1m0s" in m for m in said), said
    assert len(said) == 2, said  # not restarted meanwhile
    alive(clean)


def _pod_spec_with(**extra: Any) -> dict[str, Any]:
    return {"containers": [_gpu_container("main", 8)], **extra}


def test_a_template_reaches_only_what_its_submitter_may_get(clean: Cluster) -> None:
    """bob may not `get secrets`, yet the controller created pods mounting the namespace's
    `deployer-token` for him (and `pods/log` is his). The admission policy asks the API
    server's authorizer with bob's own rights: a Secret volume, a Secret in env, a
    ConfigMap he may not read are refused at the door, with why."""
    secret_volume = _with_template(
        "secretvol",
        _pod_spec_with(volumes=[{"name": "t", "secret": {"secretName": "deployer-token"}}]),
    )
    secret_env = _with_template("secretenv", _pod_spec_with())
    secret_env["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "deployer-token", "key": "token"}}}
    ]
    config_from = _with_template("configfrom", _pod_spec_with())
    config_from["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "settings"}}
    ]
    for job in (secret_volume, secret_env, config_from):
        done = clean.apply("bob", "team-a", job)
        assert done.returncode != 0, f"{job['metadata']['name']} was accepted"
        assert "its submitter may get" in done.stderr, done.stderr
    # What a user may get stays theirs to use: the controller's own service account token
    # aside, an emptyDir and a plain env are fine.
    plain = _with_template("plain", _pod_spec_with(volumes=[{"name": "s", "emptyDir": {}}]))
    assert clean.apply("bob", "team-a", plain).returncode == 0
    clean.wait("team-a", "plain", "Running")


def _policy_settled(cluster: Cluster) -> None:
    """Wait until the admission policy's binding is older than the controller's margin
    (`POLICY_SETTLE_SECONDS`): a job created sooner is not taken as checked by it."""
    from caldera.k8s.access.admission import POLICY_NAME, POLICY_SETTLE_SECONDS
    from caldera.k8s.cluster.api import from_rfc3339

    done = cluster.kubectl(
        "admin", "get", "validatingadmissionpolicybinding", POLICY_NAME, "-o", "json"
    )
    assert done.returncode == 0, done.stderr
    created = from_rfc3339(json.loads(done.stdout)["metadata"]["creationTimestamp"])
    time.sleep(max(created + POLICY_SETTLE_SECONDS + 1.5 - time.time(), 0.0))


def test_without_the_policy_the_controller_refuses_what_it_cannot_check(clean: Cluster) -> None:
    """With the policy's binding gone, the controller created bob's pods mounting the
    namespace's `deployer-token` (Kubernetes records no creator it could ask about). Now
    it Rejects a template reading a Secret, a ConfigMap or a PVC, naming the reference and
    the missing policy; with the policy in force, a ConfigMap bob may get runs."""
    from caldera_support import without_admission_policy

    cases = {
        "secretvol": _pod_spec_with(
            volumes=[{"name": "t", "secret": {"secretName": "deployer-token"}}]
        ),
        "claimvol": _pod_spec_with(
            volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        ),
        "envfrom": {
            "containers": [
                {**_gpu_container("main", 8), "envFrom": [{"secretRef": {"name": "deployer"}}]}
            ]
        },
    }
    with without_admission_policy(clean):
        for name, pod_spec in cases.items():
            assert clean.apply("bob", "team-a", _with_template(name, pod_spec)).returncode == 0
        for name in cases:
            wait_for(f"{name} Rejected", lambda n=name: clean.state("team-a", n) == "Rejected")
        reasons = {name: clean.status("team-a", name)["reason"] for name in cases}
        assert "secret deployer-token" in reasons["secretvol"], reasons
        assert "persistentvolumeclaim data" in reasons["claimvol"], reasons
        assert "secret deployer" in reasons["envfrom"], reasons
        assert all("admission policy" in r and "\n" not in r for r in reasons.values()), reasons
        assert not clean.pods("team-a", "secretvol")
    # The policy back: what bob may get is his to use (the controller reads the policy).
    role = clean.kubectl(
        "admin", "-n", "team-a", "create", "role", "read-bob-settings", "--verb=get",
        "--resource=configmaps", "--resource-name=bob-settings",
    )  # fmt: skip
    assert role.returncode == 0 or "AlreadyExists" in role.stderr, role.stderr
    bound = clean.kubectl(
        "admin", "-n", "team-a", "create", "rolebinding", "read-bob-settings",
        "--role=read-bob-settings", "--user=bob",
    )  # fmt: skip
    assert bound.returncode == 0 or "AlreadyExists" in bound.stderr, bound.stderr
    _policy_settled(clean)
    mine = {
        "containers": [
            {**_gpu_container("main", 8), "envFrom": [{"configMapRef": {"name": "bob-settings"}}]}
        ]
    }
    done = clean.apply("bob", "team-a", _with_template("mine", mine))
    assert done.returncode == 0, done.stderr
    clean.wait("team-a", "mine", "Running")
    alive(clean)


def test_pod_security_baseline_is_refused_by_the_policy_and_the_controller(
    clean: Cluster,
) -> None:
    """`runAsUser: 0`, `procMount: Unmasked`, a `runtimeClassName` and an unsafe sysctl
    passed both lines. The policy refuses them at apply; without the policy, the
    controller Rejects them with the same reason."""
    from caldera_support import without_admission_policy

    cases = {
        "root": _pod_spec_with(securityContext={"runAsUser": 0}),
        "procmount": {
            "containers": [
                {**_gpu_container("main", 8), "securityContext": {"procMount": "Unmasked"}}
            ]
        },
        "runtime": _pod_spec_with(runtimeClassName="kata"),
        "sysctl": _pod_spec_with(
            securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
        ),
    }
    for name, pod_spec in cases.items():
        done = clean.apply("bob", "team-a", _with_template(name, pod_spec))
        assert done.returncode != 0 and "pod template may not" in done.stderr, (name, done)
    with without_admission_policy(clean):
        for name, pod_spec in cases.items():
            assert clean.apply("bob", "team-a", _with_template(name, pod_spec)).returncode == 0
        for name in cases:
            wait_for(f"{name} Rejected", lambda n=name: clean.state("team-a", n) == "Rejected")
            assert "pod template may not" in clean.status("team-a", name)["reason"]
    alive(clean)


def test_pods_meet_pod_security_restricted_and_contradictions_are_refused(
    clean: Cluster,
) -> None:
    """A served namespace labelled `restricted` (what render and the chart now label by
    default): a template with no securityContext runs, its pods admitted by Pod Security
    Admission with the defaults the controller filled (before, PSA refused every pod: no
    runAsNonRoot, no seccomp profile, capabilities kept, and the job never ran). A template
    that contradicts the level is refused by the policy at apply and, without the policy,
    Rejected by the controller with the same reason."""
    from caldera_support import without_admission_policy

    label = "pod-security.kubernetes.io/enforce"
    done = clean.kubectl(
        "admin", "label", "--overwrite", "namespace", "team-a", f"{label}=restricted"
    )
    assert done.returncode == 0, done.stderr
    try:
        assert clean.apply("bob", "team-a", training_job("plainpsa")).returncode == 0
        clean.wait("team-a", "plainpsa", "Running")
        (pod,) = clean.running_pods("team-a", "plainpsa")
        assert pod.spec.security_context.run_as_non_root is True
        assert pod.spec.containers[0].security_context.capabilities.drop == ["ALL"]
        cases = {
            "nonroot": _pod_spec_with(securityContext={"runAsNonRoot": False}),
            "nfs": _pod_spec_with(volumes=[{"name": "n", "nfs": {"server": "s", "path": "/"}}]),
            "keepcaps": {
                "containers": [
                    {
                        **_gpu_container("main", 8),
                        "securityContext": {"capabilities": {"drop": ["NET_RAW"]}},
                    }
                ]
            },
        }
        for name, pod_spec in cases.items():
            done = clean.apply("bob", "team-a", _with_template(name, pod_spec))
            assert done.returncode != 0 and "restricted" in done.stderr, (name, done.stderr)
        with without_admission_policy(clean):
            for name, pod_spec in cases.items():
                assert clean.apply("bob", "team-a", _with_template(name, pod_spec)).returncode == 0
            for name in cases:
                wait_for(f"{name} Rejected", lambda n=name: clean.state("team-a", n) == "Rejected")
                assert "restricted" in clean.status("team-a", name)["reason"]
    finally:
        clean.kubectl("admin", "label", "namespace", "team-a", f"{label}-")
    alive(clean)


def test_a_nodes_pod_limit_is_placed_against(clean: Cluster) -> None:
    """A 0-GPU gang went onto one node past its pod limit (600 tasks, 110 pods: 490 never
    bound, all recreated every ~70 s). Here every node takes 4 pods: a gang of 6 spreads
    over two nodes and runs."""
    core = k8s.client.CoreV1Api(clean.client())
    nodes = [n.metadata.name for n in core.list_node(label_selector="caldera.io/kwok=true").items]
    before = {}
    for node in nodes:
        found = core.read_node_status(node)
        before[node] = found.status.allocatable["pods"]
        core.patch_node_status(node, {"status": {"allocatable": {"pods": "4"}}})
    try:
        wait_for(
            "the pod limit on every node",
            lambda: all(core.read_node_status(n).status.allocatable["pods"] == "4" for n in nodes),
        )
        job = training_job("wide", replicas=6, gpus=0)
        job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {}
        assert clean.apply("bob", "team-a", job).returncode == 0
        clean.wait("team-a", "wide", "Running", timeout=90)
        placed = [p.spec.node_name for p in clean.running_pods("team-a", "wide")]
        assert len(placed) == 6 and max(placed.count(n) for n in placed) <= 4, placed
        assert "StartTimeout" not in clean.events("team-a", "wide")
    finally:
        for node, pods in before.items():
            core.patch_node_status(node, {"status": {"allocatable": {"pods": pods}}})
    alive(clean)


def test_other_teams_pods_take_a_node_slot_each(clean: Cluster) -> None:
    """Pods caldera did not create counted as one pod slot per node (none when they asked
    for nothing), so caldera started a gang onto a node its other pods had filled. Every
    node takes 4 pods and three best-effort pods of another namespace run on the first:
    a gang of all the slots caldera sees less one waits; one that fits runs, at most one
    of its pods on the first node."""
    core = k8s.client.CoreV1Api(clean.client())
    nodes = sorted(
        n.metadata.name for n in core.list_node(label_selector="caldera.io/kwok=true").items
    )
    before = {n: core.read_node_status(n).status.allocatable["pods"] for n in nodes}
    first = nodes[0]
    try:
        for node in nodes:
            core.patch_node_status(node, {"status": {"allocatable": {"pods": "4"}}})
        wait_for(
            "the pod limit on every node",
            lambda: all(core.read_node_status(n).status.allocatable["pods"] == "4" for n in nodes),
        )
        for i in range(3):
            body = {
                "metadata": {"name": f"agent-{i}"},
                "spec": {
                    "nodeName": first,
                    "containers": [{"name": "agent", "image": "registry.example/agent:v1"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            }
            core.create_namespaced_pod("elsewhere", body)
        wait_for(
            "the other team's pods running",
            lambda: all(
                p.status.phase == "Running" for p in core.list_namespaced_pod("elsewhere").items
            ),
        )
        slots = 4 * len(nodes) - 3
        too_wide = training_job("toowide", replicas=slots + 1, gpus=0)
        too_wide["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {}
        assert clean.apply("bob", "team-a", too_wide).returncode == 0
        wait_for(
            "toowide's Waiting event", lambda: event_messages(clean, "team-a", "toowide", "Waiting")
        )
        assert clean.status("team-a", "toowide")["state"] == "Pending"
        assert not clean.pods("team-a", "toowide")
        clean.kubectl("bob", "-n", "team-a", "delete", PLURAL, "toowide")
        wide = training_job("fits", replicas=slots, gpus=0)
        wide["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {}
        assert clean.apply("bob", "team-a", wide).returncode == 0
        clean.wait("team-a", "fits", "Running", timeout=90)
        placed = [p.spec.node_name for p in clean.running_pods("team-a", "fits")]
        assert len(placed) == slots and placed.count(first) <= 1, placed
        assert "StartTimeout" not in clean.events("team-a", "fits")
    finally:
        for i in range(3):
            core.delete_namespaced_pod(f"agent-{i}", "elsewhere", grace_period_seconds=0)
        for node, pods in before.items():
            core.patch_node_status(node, {"status": {"allocatable": {"pods": pods}}})
    alive(clean)
