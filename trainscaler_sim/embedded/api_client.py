"""The job driver's small HTTP client for trainscaler's API (KubeML's routes).

``POST /train`` submits a train request and returns its job id; ``POST /job``
sends a running job's end-of-epoch ``TrainTask`` and returns the parallelism
to use next when it is decided; ``GET /jobs``, ``GET /plan`` and ``GET /queue``
feed the table and the run summary. Answers are read leniently (a few field spellings),
because the driver only needs a handful of numbers out of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx


class ApiCallError(RuntimeError):
    """The API answered with an error or could not be reached."""


def find_int(data: Any, *names: str) -> int | None:
    """The first integer found under one of ``names``, at the top or one level down."""
    if not isinstance(data, Mapping):
        return None
    for name in names:
        value = data.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    for value in data.values():
        if isinstance(value, Mapping):
            found = find_int(value, *names)
            if found is not None:
                return found
    return None


def find_str(data: Any, *names: str) -> str | None:
    if not isinstance(data, Mapping):
        return None
    for name in names:
        value = data.get(name)
        if isinstance(value, str) and value:
            return value
    return None


class TrainscalerApi:
    def __init__(self, base_url: str, *, token: str | None, timeout: float = 10.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, *, body: Any = None) -> Any:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as error:
            raise ApiCallError(f"{method} {path}: {error}") from error
        if response.status_code == 404 and method == "GET":
            return None
        if response.status_code >= 400:
            raise ApiCallError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        if not response.content:
            return {}
        return response.json()

    def train(self, request: Mapping[str, Any]) -> tuple[str, str]:
        """``POST /train``: (job id, job key ``namespace/id``)."""
        answer = self._call("POST", "/train", body=dict(request))
        if isinstance(answer, str):
            job_id = answer
        else:
            job_id = find_str(answer, "job_id", "jobId", "id") or ""
        if not job_id:
            raise ApiCallError(f"POST /train: no job id in {answer!r}")
        namespace = str(request.get("namespace") or "default")
        key = find_str(answer, "job", "key") if not isinstance(answer, str) else None
        if key is None or "/" not in key:
            key = job_id if "/" in job_id else f"{namespace}/{job_id}"
        return job_id.rpartition("/")[2], key

    def report(self, task: Mapping[str, Any]) -> int | None:
        """``POST /job``: the parallelism to use next, when the answer carries it."""
        answer = self._call("POST", "/job", body=dict(task))
        return find_int(answer, "parallelism", "next_parallelism", "target")

    def finish(self, job_id: str) -> None:
        self._call("DELETE", f"/finish/{job_id}")

    def job(self, job_id: str) -> Mapping[str, Any] | None:
        answer = self._call("GET", f"/jobs/{job_id}")
        return answer if isinstance(answer, Mapping) else None

    def jobs(self) -> list[Any]:
        """``GET /jobs``: every job's summary."""
        answer = self._call("GET", "/jobs")
        return answer if isinstance(answer, list) else []

    def plan(self) -> Mapping[str, Any] | None:
        """``GET /plan``: the planner's newest round, with the cluster it saw (None before one)."""
        answer = self._call("GET", "/plan")
        return answer if isinstance(answer, Mapping) else None

    def queue(self) -> Mapping[str, Any]:
        answer = self._call("GET", "/queue")
        return answer if isinstance(answer, Mapping) else {}
