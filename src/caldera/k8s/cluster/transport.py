"""The transport under `caldera.k8s.cluster.client.KubeClusterAPI`: one call of the official
`kubernetes` client, asked again while the API server is busy, its failures as one-line
`ClusterError`s, its raw answer decoded as JSON.

- every call has a timeout (`request_timeout`); a refused connection is not retried, so an
  unreachable cluster fails fast with one line, not after minutes;
- an API server that is busy — 429 from API Priority and Fairness, 500/502/503/504, a read
  timeout — is asked again after a back-off with jitter (its `Retry-After` honoured), a few
  times within `retry_budget` seconds, before the call fails (issue 9, defect 3);
- a 403 from a ResourceQuota is `QuotaExceeded` (not now), not `Forbidden` (never);
- a 403 on a create in a namespace being deleted is `NotFound`: the namespace is as good as
  gone (a 404 follows once it is);
- a 404 on Volcano's API group with no object named is `VolcanoMissing`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from caldera.errors import NotFound
from caldera.k8s.cluster import wirejson
from caldera.k8s.cluster.api import (
    ClusterConflict,
    ClusterError,
    ClusterUnavailable,
    EvictionBlocked,
    Forbidden,
    Invalid,
    Object,
    QuotaExceeded,
    VolcanoMissing,
)
from caldera.trainingjob_api import api_message, kube_configuration

__all__ = ["POOL", "VOLCANO_GROUP", "VOLCANO_VERSION", "ApiTransport", "load_api_client"]

VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
_T = TypeVar("_T")
_BUSY = frozenset({429, 500, 502, 503, 504})
POOL = 32  # connections per client: watches (one per informer) + writers + the Lease

# The client's API classes, untyped: caldera hands them plain dicts in wire form.
client: Any = kubernetes.client


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, else the in-cluster service account, else the
    default kubeconfig (KUBECONFIG, ~/.kube/config). One-line ClusterError otherwise."""
    configuration = kube_configuration(kubeconfig, context)
    configuration.retries = False  # fail fast: the controller loop retries on its own
    # Connections kept open: the informers' watches hold one each, the writers one each
    # (the client's default, 5 per CPU, would close and re-open TLS connections under load).
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, POOL)
    return client.ApiClient(configuration)


class _Busy(Exception):
    """The server asked to come back later (or did not answer in time)."""

    def __init__(self, message: str, retry_after: float | None = None, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.status = status


def _retry_after(error: ApiException) -> float | None:
    headers = error.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return min(max(float(value), 0.0), 30.0) if value is not None else None
    except ValueError:
        return None


def _message(error: ApiException) -> str:
    return api_message(error)


class ApiTransport:
    """One client call at a time, as `KubeClusterAPI` makes them: retried while the server
    is busy, its failures turned into one-line `ClusterError`s, its answer read as JSON."""

    def __init__(
        self,
        api_client: Any,
        request_timeout: float = 30.0,
        retry_budget: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api_client = api_client
        self.host = str(api_client.configuration.host)
        self.timeout = request_timeout
        self.retry_budget = retry_budget  # seconds of back-off one call may spend
        self.sleep = sleep
        self.requests = 0  # API requests sent (retries included)
        self.retries = 0
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.scheduling: Any = client.SchedulingV1Api(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.version: Any = client.VersionApi(api_client)
        self.admission: Any = client.AdmissionregistrationV1Api(api_client)

    def close(self) -> None:
        """Close the client's connection pool."""
        self.api_client.close()

    def _call(
        self, what: str, call: Callable[[], _T], volcano: bool = False, retry: bool = True
    ) -> _T:
        """Run one client call, asking a busy server again; turn failures into one-line
        ClusterErrors."""
        waited = 0.0
        attempt = 0
        while True:
            try:
                return self._once(what, call, volcano)
            except _Busy as busy:
                attempt += 1
                pause = busy.retry_after or min(0.2 * 2**attempt, 5.0)
                pause *= 1.0 + random.random() * 0.25  # jitter: controllers must not sync up
                if not retry or waited + pause > self.retry_budget:
                    raise ClusterUnavailable(busy.message) from None
                self.retries += 1
                self.sleep(pause)
                waited += pause

    def _once(self, what: str, call: Callable[[], _T], volcano: bool) -> _T:
        self.requests += 1
        try:
            return call()
        except ApiException as error:
            status = error.status or 0
            text = _message(error)
            if status == 404:
                # A missing CRD answers 404 "the server could not find the requested
                # resource"; a missing object names the object.
                if volcano and (not text or "could not find the requested resource" in text):
                    raise VolcanoMissing(
                        f"the Volcano CRDs are not installed ({VOLCANO_GROUP}/"
                        f"{VOLCANO_VERSION} not found on {self.host}): install Volcano first"
                    ) from None
                raise NotFound(what) from None
            if status == 429 and "disruption budget" in text:
                # The Eviction API's "no" from a PodDisruptionBudget: not a busy server,
                # asking again at once would only be refused again.
                raise EvictionBlocked(f"{what}: {text}") from None
            if status == 403 and "exceeded quota" in text:
                raise QuotaExceeded(f"{what}: {text}") from None
            if status == 403 and "because it is being terminated" in text:
                # A create in a namespace being deleted (NamespaceLifecycle): the namespace,
                # and every TrainingJob in it, is going away — as good as gone, not a refusal
                # of the request (which would fail the job, or spend a retry, for nothing).
                raise NotFound(f"{what}: {text}") from None
            if status in (401, 403):
                raise Forbidden(f"{what}: forbidden ({status}): {text}") from None
            if status == 409:
                raise ClusterConflict(f"{what}: {text or 'conflict'}") from None
            if status in (400, 415, 422):
                raise Invalid(f"{what}: {text or 'invalid'}") from None
            if status in _BUSY or status == 0:
                raise _Busy(
                    f"{what}: the API server at {self.host} answered {status}: {text}",
                    _retry_after(error),
                    status,
                ) from None
            raise ClusterError(f"{what}: HTTP {status}: {text}") from None
        except urllib3.exceptions.ReadTimeoutError:
            raise _Busy(f"{what}: the API server at {self.host} did not answer in time") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            reason = getattr(error, "reason", None) or error
            text = " ".join(str(reason).split())
            if "refused" in text.lower():
                text = "connection refused"
            raise ClusterUnavailable(
                f"cannot reach the Kubernetes API at {self.host}: {text}"
            ) from None

    @staticmethod
    def _json(response: Any) -> Any:
        return wirejson.loads(response.data or b"null")  # bounded nesting: issue 34

    def _send(
        self, what: str, call: Callable[[], Any], volcano: bool = False, retry: bool = True
    ) -> None:
        """A call whose answer nobody reads. Read to its end all the same: a raw answer left
        unread keeps its connection out of the pool, so every delete, eviction and Event
        paid a new TLS handshake (and the API server with it)."""
        response = self._call(what, call, volcano, retry)
        getattr(response, "data", None)

    def _items(self, what: str, call: Callable[[], Any], volcano: bool = False) -> list[Object]:
        body = self._json(self._call(what, call, volcano))
        return list(body.get("items") or [])

    def _read(self, what: str, call: Callable[[], Any]) -> Object | None:
        try:
            found: Object = self._json(self._call(what, call))
        except NotFound:
            return None
        return found

    def _delete(self, what: str, call: Callable[[], Any], volcano: bool = False) -> bool:
        try:
            self._send(what, call, volcano)
        except NotFound:
            return False
        return True
