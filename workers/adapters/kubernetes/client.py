"""The HTTP link to the Kubernetes API server: configuration, rate limiting, JSON.

Owns three things:

- loading the official client's configuration (in-cluster service account or a
  kubeconfig path from the settings);
- the client-side QPS/burst token bucket (client-go's ``--kube-api-qps`` and
  ``--kube-api-burst``), driven by an injected clock;
- ``KubeClient``: plain-JSON requests and watch streams over the official
  ``kubernetes`` ``ApiClient`` transport. Objects stay the dicts the server
  sends (camelCase, as ``kubectl get -o json`` shows them), which is what the
  pure accounting in ``scheduler_core`` takes and what custom resources are
  anyway.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from scheduler_core.ports import Clock
from workers.settings import Settings

JsonObject = dict[str, Any]
# Told of every request's verb and answer (status code, or "error" when none came).
Observe = Callable[[str, int | str], None]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Seconds to wait for a TCP connection and for one non-watch response.
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0


class MonotonicClock:
    """The real clock for rate limiting and backoff (never jumps backwards)."""

    def now(self) -> float:
        return time.monotonic()


class WallClock:
    """The real wall clock, for timestamps written into the API (events, status)."""

    def now(self) -> float:
        return time.time()


class KubeApiError(Exception):
    """The API server answered with a non-2xx status."""

    def __init__(self, status: int, *, reason: str, body: JsonObject | None = None) -> None:
        message = (body or {}).get("message") or reason
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.reason = reason
        self.body = body or {}


class KubeConnectionError(Exception):
    """No answer from the API server: connection refused, reset or timed out."""


class TokenBucket:
    """client-go's token bucket: ``qps`` tokens per second, at most ``burst`` saved.

    ``acquire`` blocks (through the injected ``sleep``) until a token is
    available. Thread-safe: every informer thread and the scaler share one.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Clock,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"qps must be > 0 and burst >= 1 (got qps={qps}, burst={burst})")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock.now()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token; return how many seconds the caller must wait for it."""
        with self._lock:
            now = self._clock.now()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._qps

    def acquire(self) -> None:
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)


def load_configuration(settings: Settings) -> k8s_client.Configuration:
    """The official client's configuration: in-cluster, or the kubeconfig in the settings."""
    configuration = k8s_client.Configuration()
    if settings.kube_in_cluster:
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    else:
        # None means the client's own default (KUBECONFIG or ~/.kube/config).
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=settings.kubeconfig,
            client_configuration=configuration,
            persist_config=False,
        )
    # One connection per watch stream plus a few for requests.
    configuration.connection_pool_maxsize = 32
    # Retries are ours (informer backoff, scaler error mapping), not urllib3's.
    configuration.retries = False
    return configuration


@dataclass
class WatchStream:
    """One open watch response; ``close`` may be called from another thread."""

    response: Any
    _closed: threading.Event = field(default_factory=threading.Event)

    def events(self) -> Iterator[JsonObject]:
        """Watch events (``{"type": ..., "object": ...}``), one per JSON line."""
        buffer = b""
        try:
            for chunk in self.response.stream(8192, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buffer.strip():
                yield json.loads(buffer)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            if not self._closed.is_set():
                raise KubeConnectionError(f"watch stream broke: {error}") from error
        finally:
            self.response.release_conn()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        # shutdown() unblocks a read in progress in another thread (urllib3 >= 2.3);
        # it refuses once the stream ended and the connection went back to the pool.
        shutdown = getattr(self.response, "shutdown", None)
        if callable(shutdown):
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                shutdown()
        self.response.close()


class KubeClient:
    """JSON requests to the API server through the official client's transport."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        limiter: TokenBucket | None = None,
        field_manager: str = "trainscaler",
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        observe: Observe | None = None,
    ) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self._limiter = limiter
        self._read_timeout = read_timeout
        self._observe = observe

    def _observed(self, verb: str, code: int | str) -> None:
        if self._observe is not None:
            self._observe(verb, code)

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str | None,
        timeout: tuple[float, float],
    ) -> Any:
        if self._limiter is not None:
            self._limiter.acquire()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        # The serializer writes booleans as "true"/"false", as the API server expects.
        query_pairs = list((query or {}).items())
        method, url, header_params, serialized, post_params = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query_pairs,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self.api_client.call_api(
                method, url, header_params, serialized, post_params, _request_timeout=timeout
            )
        except k8s_client.ApiException as error:
            # The REST layer reports TLS failures as status 0.
            raise KubeConnectionError(str(error)) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise KubeConnectionError(f"{method} {path}: {error}") from error

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> JsonObject:
        """One request; the decoded JSON answer, or ``KubeApiError``."""
        try:
            response = self._send(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                timeout=(DEFAULT_CONNECT_TIMEOUT, self._read_timeout),
            )
            raw = response.read()
        except KubeConnectionError:
            self._observed(method, "error")
            raise
        except (urllib3.exceptions.HTTPError, OSError) as error:
            self._observed(method, "error")
            raise KubeConnectionError(f"{method} {path}: {error}") from error
        self._observed(method, response.status)
        decoded = _decode(raw)
        if not 200 <= response.status <= 299:
            raise KubeApiError(response.status, reason=str(response.reason), body=decoded)
        return decoded

    def watch(
        self,
        path: str,
        *,
        query: Mapping[str, str | int | bool],
        timeout_seconds: int,
    ) -> WatchStream:
        """Open a watch; a non-2xx answer (e.g. 410 Gone) raises ``KubeApiError``."""
        params = dict(query)
        params.update({"watch": True, "timeoutSeconds": timeout_seconds})
        try:
            response = self._send(
                "GET",
                path,
                query=params,
                body=None,
                content_type=None,
                # The server ends the watch after timeout_seconds; allow it some slack.
                timeout=(DEFAULT_CONNECT_TIMEOUT, timeout_seconds + 15.0),
            )
        except KubeConnectionError:
            self._observed("WATCH", "error")
            raise
        self._observed("WATCH", response.status)
        if not 200 <= response.status <= 299:
            try:
                decoded = _decode(response.read())
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise KubeConnectionError(f"GET {path}: {error}") from error
            raise KubeApiError(response.status, reason=str(response.reason), body=decoded)
        return WatchStream(response.response)

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]


def _decode(raw: bytes | None) -> JsonObject:
    if not raw:
        return {}
    try:
        decoded = json.loads(raw)
    except ValueError:
        return {"message": raw[:500].decode("utf-8", "replace")}
    return decoded if isinstance(decoded, dict) else {"items": decoded}


def build_kube_client(
    settings: Settings,
    *,
    clock: Clock | None = None,
    api_client: k8s_client.ApiClient | None = None,
    observe: Observe | None = None,
) -> KubeClient:
    """A client for the configured cluster, limited to the settings' QPS and burst."""
    if api_client is None:
        api_client = k8s_client.ApiClient(configuration=load_configuration(settings))
    limiter = TokenBucket(settings.kube_qps, settings.kube_burst, clock=clock or MonotonicClock())
    return KubeClient(
        api_client,
        limiter=limiter,
        field_manager=settings.kube_field_manager,
        observe=observe,
    )
