"""Issue 34's breaks that the fake cluster alone showed, on the real control plane: a pod of a
namespace whose TrainingJobs cannot be listed after a restart is no orphan; a start that never
binds is placed elsewhere, not pinned to the same node again; a job with no node to use says
so; `kubectl describe` shows readable times, and a restarted controller reads them back.

How each failed before its fix (`git log -S` on the names cited):
- the orphan (298c5a7, `InformerCache.ready`): once the restarted controller stepped, the pod
  whose job it had not read was deleted as an orphan (a deletionTimestamp at once);
- the pin (2871116, `withheld`): after the StartTimeout the job was pinned to the same node,
  which the scheduler refuses, every bind timeout forever: it never ran;
- no node (86ab61a, `waiting.py`): no Waiting condition, an empty `status.reason`, no Event;
- the times (e20599e, `_stamp`): `status.controller` held unix floats, and describe printed
  `1.796e+09`.
"""

from __future__ import annotations

import http.client
import re
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes
import yaml
from caldera_support import Cluster, training_job
from hostile_support import alive, event_messages, nested_json
from real_support import wait_for

from caldera.k8s.cluster.wirejson import loads
from caldera.trainingjob_api import GROUP, PLURAL, PROGRESS, VERSION

k8s: Any = kubernetes

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
FLOAT_TIME = re.compile(r"\d\.\d+e\+\d\d")


# -- a namespace whose TrainingJobs cannot be listed ---------------------------------------


def _wire_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """A status read with caldera's decoder (the client's own recurses past the nesting)."""
    custom = k8s.client.CustomObjectsApi(cluster.client())
    response = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
    )
    return dict(loads(response.data).get("status") or {})


class _Gate:
    """A plain-HTTP proxy in front of the real API server that answers 504 to every full list
    of one namespace's TrainingJobs while `shut` (a namespace too large or too slow to list in
    time); everything else, watches included, passes through as it is. The controller's
    start check lists with `limit=1`, which passes: the controller starts, and its informer
    for that namespace cannot sync."""

    def __init__(self, upstream: str, namespace: str) -> None:
        url = urlsplit(upstream)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.prefix = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        self.shut = True
        self.refused = 0
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def forward(self) -> None:
                path, _, query = self.path.partition("?")
                options = query.split("&")
                full_list = not any(o.startswith(("watch=", "limit=")) for o in options)
                if gate.shut and path == gate.prefix and full_list:
                    gate.refused += 1
                    self.send_error(504, "the list timed out")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                upstream = http.client.HTTPSConnection(
                    gate.host, gate.port, context=ssl._create_unverified_context(), timeout=400
                )
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    self.send_response(answer.status, answer.reason)
                    for key, value in answer.getheaders():
                        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(key, value)
                    self.send_header("Connection", "close")
                    if not answer.chunked:
                        data = answer.read()
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    # Chunked on, chunk by chunk: the client reads a watch's events as they come.
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while chunk := answer.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (OSError, http.client.HTTPException):
                    pass  # the controller closed a watch, or the test ended
                finally:
                    upstream.close()
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def _behind_gate(cluster: Cluster, namespace: str, folder: Path) -> Iterator[_Gate]:
    """The controller restarted (SIGKILL) talking to the API server through a `_Gate` on
    `namespace`; afterwards restarted as it was."""
    config = yaml.safe_load(cluster.controller_kubeconfig.read_text())
    (entry,) = config["clusters"]
    gate = _Gate(entry["cluster"]["server"], namespace)
    entry["cluster"] = {"server": gate.url}
    gated = folder / "gated.kubeconfig"
    gated.write_text(yaml.safe_dump(config))
    gated.chmod(0o600)
    direct = cluster.controller_kubeconfig
    cluster.stop_controller(kill=True)
    cluster.controller_kubeconfig = gated
    try:
        cluster.start_controller()
        yield gate
    finally:
        cluster.stop_controller(kill=True)
        cluster.controller_kubeconfig = direct
        cluster.start_controller()
        gate.close()


def test_a_restart_that_cannot_list_a_namespace_leaves_its_pods_alone(
    clean: Cluster, tmp_path: Path
) -> None:
    """alice's job runs in `serving`; bob's 1,100-level template is Rejected in team-a. The
    controller restarts while `serving`'s TrainingJobs cannot be listed (a `_Gate`): the running
    pod there, which no job it has read claims, is no orphan (it was deleted while its job's
    status still said Running); team-a goes on (a newcomer runs) and once `serving` can be
    listed again its new job is admitted and the first still runs on its pod."""
    assert clean.apply("alice", "serving", training_job("steady")).returncode == 0
    clean.wait("serving", "steady", "Running")
    (steady_pod,) = clean.running_pods("serving", "steady")
    nested = clean.kubectl(
        "bob", "-n", "team-a", "create", "-f", "-", stdin=nested_json("nested", 1100)
    )
    assert nested.returncode == 0, nested.stderr
    wait_for(
        "nested Rejected",
        lambda: _wire_status(clean, "team-a", "nested").get("state") == "Rejected",
    )
    core = k8s.client.CoreV1Api(clean.client())

    def steady_untouched() -> None:
        pod = core.read_namespaced_pod(steady_pod.metadata.name, "serving")
        assert pod.metadata.uid == steady_pod.metadata.uid
        assert pod.metadata.deletion_timestamp is None, (
            f"steady's pod deleted as an orphan\n{clean.log_tail(40)}"
        )

    with _behind_gate(clean, "serving", tmp_path) as gate:
        # The informers wait (up to a minute) for `serving`'s list, then the controller steps.
        assert clean.apply("alice", "team-a", training_job("newcomer")).returncode == 0
        # One minute at most, not one per informer and per call (two, before).
        clean.wait("team-a", "newcomer", "Running", timeout=90)
        for _ in range(4):  # two resyncs at least, the orphan grace period (3 s) past
            steady_untouched()
            time.sleep(1.5)
        alive(clean)
        assert gate.refused > 0  # the informer for `serving` did try, and could not list
        assert _wire_status(clean, "team-a", "nested")["state"] == "Rejected"
        gate.shut = False  # `serving` listable again: the informer's next try syncs it
        assert clean.apply("alice", "serving", training_job("later")).returncode == 0
        clean.wait("serving", "later", "Running", timeout=90)
        steady_untouched()
        assert clean.state("serving", "steady") == "Running"
        assert clean.status("serving", "steady")["attempts"] == 1
        alive(clean)


# -- a start that never binds ----------------------------------------------------------------


def test_a_start_that_never_binds_is_placed_elsewhere_not_pinned_again(clean: Cluster) -> None:
    """The scheduler refuses the node caldera picked for a reason caldera does not count (here
    ephemeral storage, which only that node lacks). After the StartTimeout, which says the
    scheduler's reason, the job goes to another node; it was pinned to the same node again
    after every bind timeout, and never ran."""
    assert clean.apply("alice", "team-a", training_job("probe")).returncode == 0
    clean.wait("team-a", "probe", "Running")
    (probe,) = clean.running_pods("team-a", "probe")
    first = probe.spec.node_name  # where caldera puts an 8-GPU task on an empty cluster
    clean.kubectl("alice", "-n", "team-a", "delete", PLURAL, "probe")
    core = k8s.client.CoreV1Api(clean.client())
    wait_for("the probe's pod gone", lambda: not clean.pods("team-a", "probe"))
    nodes = [n.metadata.name for n in core.list_node(label_selector="caldera.io/kwok=true").items]
    storage = {n: ("1Mi" if n == first else "100Gi") for n in nodes}
    try:
        for node, room in storage.items():
            core.patch_node_status(node, {"status": {"allocatable": {"ephemeral-storage": room}}})
        wait_for(
            "ephemeral storage on every node",
            lambda: all(
                core.read_node_status(n).status.allocatable.get("ephemeral-storage") == room
                for n, room in storage.items()
            ),
        )
        job = training_job("roomy")
        container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
        container["resources"]["requests"] = {"ephemeral-storage": "1Gi"}
        assert clean.apply("bob", "team-a", job).returncode == 0
        wait_for(
            "roomy's StartTimeout",
            lambda: event_messages(clean, "team-a", "roomy", "StartTimeout"),
            timeout=90,
        )
        said = event_messages(clean, "team-a", "roomy", "StartTimeout")
        assert any("ephemeral-storage" in m for m in said), said
        clean.wait("team-a", "roomy", "Running", timeout=90)
        (pod,) = clean.running_pods("team-a", "roomy")
        assert pod.spec.node_name != first, (first, pod.spec.node_name)
        assert clean.status("team-a", "roomy")["attempts"] == 2
    finally:
        for node in nodes:
            core.patch_node_status(node, {"status": {"allocatable": {"ephemeral-storage": None}}})
    alive(clean)


# -- no node to use ---------------------------------------------------------------------------


def test_a_job_with_no_node_to_use_says_so(clean: Cluster, tmp_path: Path) -> None:
    """`kubernetes.node_selector` (the docs' own example) matching no node: a job waited
    Pending forever with an empty reason and no Event. Now status.reason, a Waiting
    condition (NoNodes) and a Waiting Event say that no node may be used, and which
    selector chose none."""
    config = yaml.safe_load(clean.config.read_text())
    config["kubernetes"]["node_selector"] = "caldera.io/pool=nowhere"
    nowhere = tmp_path / "caldera.yaml"
    nowhere.write_text(yaml.safe_dump(config))
    session_config = clean.config
    clean.stop_controller()
    clean.config = nowhere
    try:
        clean.start_controller()
        assert clean.apply("bob", "team-a", training_job("lonely")).returncode == 0
        wait_for(
            "lonely's Waiting condition",
            lambda: clean.condition("team-a", "lonely", "Waiting") is not None,
            timeout=60,
        )
        found = clean.condition("team-a", "lonely", "Waiting")
        assert found is not None and found[:2] == ("True", "NoNodes"), found
        status = clean.status("team-a", "lonely")
        assert status["state"] == "Pending", status
        want = "no node caldera may use (kubernetes.node_selector: caldera.io/pool=nowhere)"
        assert want in status["reason"], status["reason"]
        wait_for(
            "lonely's Waiting event", lambda: event_messages(clean, "team-a", "lonely", "Waiting")
        )
        assert any(want in m for m in event_messages(clean, "team-a", "lonely", "Waiting"))
        assert not clean.pods("team-a", "lonely")
        alive(clean)
    finally:
        clean.stop_controller()
        clean.config = session_config
        clean.start_controller()


# -- readable times ---------------------------------------------------------------------------


def test_describe_shows_readable_times_and_a_restart_reads_them_back(clean: Cluster) -> None:
    """`kubectl describe` printed `preempt_failed_at: 1.796e+09`: the unix times under
    `status.controller` are RFC 3339 to the microsecond, describe shows them as such, and a
    restarted controller (SIGKILL) reads them back: its next status write keeps them."""
    assert clean.apply("alice", "team-a", training_job("timed")).returncode == 0
    clean.wait("team-a", "timed", "Running")
    wait_for(
        "timed's running_since",
        lambda: (clean.status("team-a", "timed").get("controller") or {}).get("running_since"),
    )
    controller = clean.status("team-a", "timed")["controller"]
    times = {k: controller.get(k) for k in ("submit", "first_start", "running_since")}
    for key, value in times.items():
        assert isinstance(value, str) and RFC3339.fullmatch(value), (key, value)
    described = clean.kubectl("admin", "-n", "team-a", "describe", PLURAL, "timed")
    assert described.returncode == 0, described.stderr
    assert not FLOAT_TIME.search(described.stdout), described.stdout
    for value in times.values():
        assert value in described.stdout, (value, described.stdout)

    clean.restart_controller()
    (pod,) = clean.running_pods("team-a", "timed")
    done = clean.kubectl(
        "admin", "-n", "team-a", "annotate", "--overwrite",
        f"pod/{pod.metadata.name}", f"{PROGRESS}=0.5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def rewritten() -> dict[str, Any] | None:  # the new controller's write, after the report
        now = clean.status("team-a", "timed").get("controller") or {}
        return now if now.get("reported_progress") == 0.5 else None

    again = wait_for("the restarted controller's status write", rewritten, timeout=60)
    assert {k: again.get(k) for k in times} == times
    assert clean.state("team-a", "timed") == "Running"
    assert clean.status("team-a", "timed")["attempts"] == 1
    alive(clean)
