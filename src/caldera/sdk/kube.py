"""The SDK on a cluster: TrainingJobs through the Kubernetes API, with the user's own
kubeconfig (so RBAC and caldera's admission policy judge the user, not a service).

    from caldera.sdk.kube import KubeClient
    with KubeClient(namespace="team-a") as kube:
        kube.submit("bert", ["torchrun", "train.py"], image="registry/train:v1",
                    type="large-job", tasks=4, gpus=8)
        job = kube.wait("bert", condition="Running", timeout=600)
        print(job["status"]["state"], kube.events("bert"))
        kube.cancel("bert")

Every failure is an `ApiError` whose message is one line (the API server's own words when it
refused: a missing RBAC verb, the admission policy, the schema).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from caldera import trainingjob_api as names
from caldera.errors import ApiError, CalderaError
from caldera.trainingjob_api import api_message, kube_configuration, training_job

__all__ = ["KubeClient"]

_FINISHED = frozenset({"Succeeded", "Failed", "Cancelled", "Rejected"})


class KubeClient:
    """TrainingJobs in one namespace (default: the kubeconfig context's, else `default`)."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        import kubernetes

        k8s: Any = kubernetes
        try:
            configuration = kube_configuration(kubeconfig, context)
        except CalderaError as error:
            raise ApiError(str(error)) from None
        configuration.retries = False  # one call, one answer: the caller decides to try again
        self.api_client = k8s.client.ApiClient(configuration)
        self.custom = k8s.client.CustomObjectsApi(self.api_client)
        self.core = k8s.client.CoreV1Api(self.api_client)
        self.namespace = namespace or _context_namespace(kubeconfig, context) or "default"
        self.timeout = timeout

    def close(self) -> None:
        self.api_client.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, what: str, call: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return call()
        except ApiException as error:
            if error.status == 404:
                raise ApiError(f"{what}: not found", 404) from None
            raise ApiError(f"{what}: {api_message(error)}", error.status) from None
        except OSError as error:
            raise ApiError(f"{what}: cannot reach the Kubernetes API: {error}") from None

    # -- jobs ------------------------------------------------------------------------------

    def create(self, manifest: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create a TrainingJob from a whole manifest (as `kubectl create -f`)."""
        where = namespace or self.namespace
        name = manifest.get("metadata", {}).get("name", "?")
        created: dict[str, Any] = self._call(
            f"create {names.KIND} {where}/{name}",
            lambda: self.custom.create_namespaced_custom_object(
                names.GROUP, names.VERSION, where, names.PLURAL, manifest,
                _request_timeout=self.timeout,
            ),
        )  # fmt: skip
        return created

    def submit(
        self, name: str, command: Sequence[str], namespace: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Submit a job; `fields` as `caldera.trainingjob_api.training_job` takes them (image,
        queue, type, tasks, gpus, min_available, env, checkpoint_interval, topology, …)."""
        return self.create(training_job(name, command, **fields), namespace)

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        where = namespace or self.namespace
        found: dict[str, Any] = self._call(
            f"get {names.KIND} {where}/{name}",
            lambda: self.custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, where, names.PLURAL, name,
                _request_timeout=self.timeout,
            ),
        )  # fmt: skip
        return found

    def jobs(self, namespace: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """The namespace's TrainingJobs, oldest first; `state`: only those in it."""
        where = namespace or self.namespace
        found = self._call(
            f"list {names.PLURAL} in {where}",
            lambda: self.custom.list_namespaced_custom_object(
                names.GROUP, names.VERSION, where, names.PLURAL, _request_timeout=self.timeout
            ),
        )
        items = sorted(found.get("items") or [], key=lambda j: j["metadata"]["creationTimestamp"])
        if state is not None:
            items = [j for j in items if (j.get("status") or {}).get("state") == state]
        return list(items)

    def cancel(self, name: str, namespace: str | None = None) -> None:
        """Delete the TrainingJob: its pods go with their grace period (they belong to it)."""
        where = namespace or self.namespace
        self._call(
            f"delete {names.KIND} {where}/{name}",
            lambda: self.custom.delete_namespaced_custom_object(
                names.GROUP, names.VERSION, where, names.PLURAL, name,
                _request_timeout=self.timeout,
            ),
        )  # fmt: skip

    def events(self, name: str, namespace: str | None = None) -> list[dict[str, str]]:
        """The controller's Events about a job (reason, message, type), oldest first."""
        where = namespace or self.namespace
        found = self._call(
            f"list events of {where}/{name}",
            lambda: self.core.list_namespaced_event(
                where,
                field_selector=f"involvedObject.name={name},involvedObject.kind={names.KIND}",
                _request_timeout=self.timeout,
            ),
        )
        events = sorted(found.items, key=lambda e: e.metadata.name)  # caldera's sort in order
        return [{"reason": e.reason, "message": e.message, "type": e.type} for e in events]

    def wait(
        self,
        name: str,
        condition: str | None = None,
        states: Iterable[str] = _FINISHED,
        timeout: float = 60.0,
        interval: float = 0.5,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Poll until the job's `condition` is True (Running, Finished, …) or, without one,
        its state is one of `states`; ApiError on timeout."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(name, namespace)
            status = job.get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if condition is not None and conditions.get(condition) == "True":
                return job
            if condition is None and status.get("state") in wanted:
                return job
            if time.monotonic() > deadline:
                want = condition or "/".join(sorted(wanted))
                raise ApiError(
                    f"{names.KIND} {name} is {status.get('state') or 'not admitted'} after "
                    f"{timeout:g} s, not {want}"
                )
            time.sleep(interval)


def _context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    import kubernetes
    from kubernetes.config.config_exception import ConfigException

    config: Any = kubernetes.config
    try:
        contexts, current = config.list_kube_config_contexts(kubeconfig)
    except (ConfigException, OSError, LookupError, TypeError, ValueError):
        return None  # in-cluster, or no kubeconfig: the caller's default
    chosen = next((c for c in contexts if c["name"] == context), current) if context else current
    return str((chosen.get("context") or {}).get("namespace") or "") or None
