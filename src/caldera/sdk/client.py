"""A small, typed client for the service's REST API (httpx).

Every failure is an `ApiError` (a `caldera.errors.CalderaError`) whose message is one line a
person can act on; `status` is the HTTP status (None when the server could not be reached).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from caldera.errors import ApiError, CalderaError

__all__ = ["DEFAULT_URL", "ApiError", "CalderaError", "Client"]

DEFAULT_URL = "http://127.0.0.1:8265"
_FINAL = frozenset({"Succeeded", "Failed", "Cancelled", "Rejected"})


_EXPLAIN = {
    401: "not authenticated",
    403: "not allowed",
    404: "not found",
    409: "conflict",
}


class Client:
    """`Client()` reads CALDERA_URL and CALDERA_TOKEN."""

    def __init__(
        self, url: str | None = None, token: str | None = None, timeout: float = 30.0
    ) -> None:
        self.url = (url or os.environ.get("CALDERA_URL") or DEFAULT_URL).rstrip("/")
        token = token if token is not None else os.environ.get("CALDERA_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # Plain http (the default, on localhost) needs no CA bundle: loading one costs more
        # than a whole request.
        verify = self.url.startswith("https:")
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise ApiError(
                f"cannot reach the caldera server at {self.url} (is `caldera serve` running? "
                "set CALDERA_URL)"
            ) from None
        except httpx.TimeoutException:
            raise ApiError(f"the caldera server at {self.url} did not answer in time") from None
        except httpx.HTTPError as error:
            raise ApiError(f"request to {self.url} failed: {error}") from None
        if response.status_code >= 400:
            raise ApiError(_detail(response), response.status_code)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    # -- jobs ------------------------------------------------------------------------------

    def submit(
        self,
        command: Iterable[str],
        queue: str,
        type: str = "normal",
        tasks: int = 1,
        gpus: float = 1,
        name: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Submit a job; `fields` are any other JobRequest keys (env, labels, checkpoint…)."""
        body: dict[str, Any] = {
            "command": list(command),
            "queue": queue,
            "type": type,
            "tasks": tasks,
            "gpus": gpus,
            **fields,
        }
        if name is not None:
            body["name"] = name
        if fields.get("gpu_profile") is not None:
            del body["gpus"]  # a MIG slice per task instead (docs/gpus.md)
        result: dict[str, Any] = self._json("POST", "/v1/jobs", json=body)
        return result

    def get(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/v1/jobs/{job_id}")
        return result

    def jobs(self, **filters: Any) -> list[dict[str, Any]]:
        """Jobs, oldest first; filters: state, queue, type, user, limit."""
        params = {k: v for k, v in filters.items() if v is not None}
        result: list[dict[str, Any]] = self._json("GET", "/v1/jobs", params=params)
        return result

    def cancel(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("POST", f"/v1/jobs/{job_id}/cancel")
        return result

    def events(self, job_id: str | None = None, after: int = 0) -> list[dict[str, Any]]:
        if job_id is not None:
            result: list[dict[str, Any]] = self._json("GET", f"/v1/jobs/{job_id}/events")
            return result
        found: list[dict[str, Any]] = self._json("GET", "/v1/events", params={"after": after})
        return found

    def logs(self, job_id: str, rank: int = 0, tail: int | None = None) -> str:
        params: dict[str, Any] = {"rank": rank}
        if tail is not None:
            params["tail"] = tail
        return self._request("GET", f"/v1/jobs/{job_id}/logs", params=params).text

    def follow_logs(self, job_id: str, rank: int = 0, tail: int | None = None) -> Iterator[bytes]:
        """Yield output as it is written, until the job has ended."""
        params: dict[str, Any] = {"rank": rank, "follow": "true"}
        if tail is not None:
            params["tail"] = tail
        try:
            with self._http.stream(
                "GET", f"/v1/jobs/{job_id}/logs", params=params, timeout=None
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(_detail(response), response.status_code)
                yield from response.iter_bytes()
        except httpx.ConnectError:
            raise ApiError(f"cannot reach the caldera server at {self.url}") from None
        except httpx.RemoteProtocolError:
            raise ApiError("the caldera server closed the log stream") from None

    def wait(
        self,
        job_id: str,
        states: Iterable[str] = _FINAL,
        timeout: float = 60.0,
        interval: float = 0.1,
    ) -> dict[str, Any]:
        """Poll until the job is in one of `states`; raises ApiError on timeout."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job["state"] in wanted:
                return job
            if time.monotonic() > deadline:
                raise ApiError(
                    f"job {job_id} is {job['state']} after {timeout:g}s, "
                    f"not {'/'.join(sorted(wanted))}"
                )
            time.sleep(interval)

    # -- the service -----------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/v1/cluster")
        return result

    def queues(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._json("GET", "/v1/queues")
        return result

    def set_queue_state(self, name: str, state: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("PATCH", f"/v1/queues/{name}", json={"state": state})
        return result

    def whoami(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/v1/whoami")
        return result

    def metrics(self) -> str:
        return self._request("GET", "/metrics").text


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    if not isinstance(detail, str) or not detail:
        detail = response.reason_phrase or "error"
    what = _EXPLAIN.get(response.status_code)
    prefix = f"{response.status_code} {what}" if what else str(response.status_code)
    return f"{prefix}: {detail}"
