"""The HTTP layer: a keep-alive ``BaseHTTPRequestHandler`` routing requests to
discovery, reads, writes and watch streams, with request counting and fault
injection in front. JSON in, JSON out, ``Status`` bodies for errors."""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from . import discovery
from .admission import FieldValidation
from .errors import ApiError
from .json_types import JsonObject
from .openapi import CRD_STORAGE, serve_openapi
from .operations import ApiOperations, parse_json
from .reads import expired_watch_event, list_objects, open_watch
from .resources import ObjectRef, ResourceType
from .routing import DiscoveryTarget, ResourceTarget, parse_path, verb_of
from .subresources import Subresources
from .tables import TableRenderer, wants_table
from .timefmt import parse_time
from .traffic import FaultInjector, RequestCounter
from .watch_stream import DEFAULT_WATCH_SECONDS, client_has_gone, encode_event, stream_events

_TRUE = ("true", "1")
_PROTOBUF = "application/vnd.kubernetes.protobuf"


def _warning_headers(fields: FieldValidation) -> dict[str, str] | None:
    """RFC 7234 ``Warning: 299 - "text"`` values, comma-joined as client-go parses them."""
    if not fields.warnings:
        return None
    quoted = (json.dumps(text) for text in fields.warnings)
    return {"Warning": ", ".join(f"299 - {text}" for text in quoted)}


@dataclass
class ApiApplication:
    """Everything a request handler needs; owned by ``LoopbackApiServer``."""

    operations: ApiOperations
    counter: RequestCounter = field(default_factory=RequestCounter)
    faults: FaultInjector = field(default_factory=FaultInjector)
    stopping: threading.Event = field(default_factory=threading.Event)
    bookmark_seconds: float = 5.0
    server_address: str = ""


class ApiHttpServer(ThreadingHTTPServer):
    """Threading server with daemon threads that tracks connections so stop() can cut them."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], application: ApiApplication) -> None:
        super().__init__(address, ApiRequestHandler)
        self.application = application
        self._connections: set[socket] = set()
        self._connections_lock = threading.Lock()

    def track(self, connection: socket, *, alive: bool) -> None:
        with self._connections_lock:
            if alive:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(2)


class ApiRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without this every small response waits for the peer's delayed ACK (~40 ms).
    disable_nagle_algorithm = True
    server: ApiHttpServer

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, alive=True)

    def finish(self) -> None:
        self.server.track(self.connection, alive=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and the embedded system would drown in access logs."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -------------------------------------------------------------- plumbing
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, code: int, body: Any, *, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: ApiError) -> None:
        headers = {"Retry-After": "1"} if error.code in (429, 503) else None
        self._send_json(error.code, error.status_body(), headers=headers)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _dispatch(self, method: str) -> None:
        application = self.server.application
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        try:
            body = self._read_body()
            if body and _PROTOBUF in (self.headers.get("Content-Type") or ""):
                # Typed kubectl commands (create namespace, create deployment) send protobuf.
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json, application/yaml (protobuf is not served by the "
                    "loopback apiserver)",
                )
            target = parse_path(url.path)
            if isinstance(target, ResourceTarget):
                watch = params.get("watch", "").lower() in _TRUE
                verb = verb_of(method, target, watch=watch)
                application.counter.record(verb, target.counted_resource)
                code = application.faults.pick(verb, target.counted_resource)
                if code is not None:
                    raise ApiError(code, f"injected fault for {verb} {target.counted_resource}")
                self._serve_resource(
                    method, target, params=params, body=body, watch=watch or target.legacy_watch
                )
            elif isinstance(target, DiscoveryTarget) and method == "GET":
                self._serve_discovery(target)
            elif method == "GET" and url.path.startswith("/openapi/"):
                self._serve_openapi(url.path)
            elif method == "GET" and url.path in ("/version", "/version/"):
                self._send_json(200, discovery.VERSION_INFO)
            elif method == "GET" and url.path in ("/healthz", "/livez", "/readyz"):
                data = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                raise ApiError(404, "the server could not find the requested resource")
        except ApiError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # the server must answer, never hang the client
            self._send_error(ApiError(500, f"internal error: {type(error).__name__}: {error}"))

    def _serve_discovery(self, target: DiscoveryTarget) -> None:
        application = self.server.application
        registry = application.operations.registry
        document: JsonObject | None
        if target.core and target.version is None:
            document = discovery.core_versions(application.server_address)
        elif target.group is None:
            document = discovery.group_list(registry)
        elif target.version is None:
            document = discovery.group(registry, target.group)
        else:
            document = discovery.resource_list(registry, target.group, version=target.version)
        if document is None:
            raise ApiError(404, "the server could not find the requested resource")
        self._send_json(200, document)

    def _serve_openapi(self, path: str) -> None:
        application = self.server.application
        crds, _ = application.operations.store.items(CRD_STORAGE, None)
        answer = serve_openapi(
            application.operations.openapi,
            path,
            types=application.operations.registry.all_types(),
            crds=crds,
            accept=self.headers.get("Accept") or "",
        )
        if answer is None:
            raise ApiError(404, "the server could not find the requested resource")
        if not answer.content_type:
            raise ApiError(406, "only application/json is served for /openapi/v2")
        self.send_response(200)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    # ------------------------------------------------------------- resources
    def _serve_resource(
        self,
        method: str,
        target: ResourceTarget,
        *,
        params: dict[str, str],
        body: bytes,
        watch: bool,
    ) -> None:
        operations = self.server.application.operations
        resource_type = operations.resource(target.group, target.version, plural=target.plural)
        if params.get("dryRun") and method != "GET":
            # Refused rather than silently persisted: dry runs are not simulated.
            raise ApiError(400, "dryRun is not supported by the loopback apiserver")
        if (
            resource_type.namespaced
            and target.namespace is None
            and (target.name is not None or method not in ("GET",))
        ):
            raise ApiError(404, "the server could not find the requested resource")
        if not resource_type.namespaced and target.namespace is not None:
            raise ApiError(404, "the server could not find the requested resource")
        namespace = target.namespace or ""
        sub = target.subresource
        if sub is not None and not (
            (sub == "status" and resource_type.has_status)
            or (sub == "scale" and resource_type.scale is not None)
            or (sub == "binding" and resource_type.kind == "Pod" and not resource_type.group)
        ):
            raise ApiError(404, "the server could not find the requested resource")
        if target.name is None:
            self._serve_collection(
                method,
                resource_type,
                namespace=target.namespace,
                params=params,
                body=body,
                watch=watch,
            )
            return
        ref = ObjectRef(resource_type, namespace, target.name)
        if sub == "scale":
            self._serve_scale(method, ref, body=body)
        elif sub == "binding":
            if method != "POST":
                raise ApiError(405, "binding only supports create")
            subresources = Subresources(operations)
            self._send_json(201, subresources.bind(ref.key, parse_json(body)))
        elif method == "GET":
            obj = operations.get(ref)
            renderer = self._table_renderer(resource_type, params)
            self._send_json(200, renderer.of_object(obj) if renderer else obj)
        elif method == "PUT":
            fields = FieldValidation.from_params(params)
            updated = operations.update(ref, parse_json(body), subresource=sub, fields=fields)
            self._send_json(200, updated, headers=_warning_headers(fields))
        elif method == "PATCH":
            fields = FieldValidation.from_params(params)
            content_type = self.headers.get("Content-Type") or ""
            patched = operations.patch(
                ref, body, content_type=content_type, subresource=sub, fields=fields
            )
            self._send_json(200, patched, headers=_warning_headers(fields))
        elif method == "DELETE" and sub is None:
            self._send_json(200, operations.delete(ref, self._delete_options(params, body)))
        else:
            raise ApiError(405, f"method {method} is not allowed here")

    @staticmethod
    def _delete_options(params: dict[str, str], body: bytes) -> JsonObject:
        options = parse_json(body) or {}
        if not isinstance(options, dict):
            raise ApiError(400, "DeleteOptions must be a JSON object")
        if "propagationPolicy" in params:
            options["propagationPolicy"] = params["propagationPolicy"]
        if params.get("orphanDependents", "").lower() in _TRUE:
            options["orphanDependents"] = True
        return options

    def _serve_scale(self, method: str, ref: ObjectRef, *, body: bytes) -> None:
        scale = Subresources(self.server.application.operations)
        if method == "GET":
            self._send_json(200, scale.get_scale(ref))
        elif method == "PUT":
            self._send_json(200, scale.update_scale(ref, parse_json(body)))
        elif method == "PATCH":
            content_type = self.headers.get("Content-Type") or ""
            self._send_json(200, scale.patch_scale(ref, body, content_type=content_type))
        else:
            raise ApiError(405, f"method {method} is not allowed on scale")

    def _serve_collection(
        self,
        method: str,
        resource_type: ResourceType,
        *,
        namespace: str | None,
        params: dict[str, str],
        body: bytes,
        watch: bool,
    ) -> None:
        operations = self.server.application.operations
        if method == "GET" and watch:
            self._serve_watch(resource_type, namespace, params=params)
        elif method == "GET":
            listed = list_objects(
                operations.store, resource_type, namespace=namespace, params=params
            )
            renderer = self._table_renderer(resource_type, params)
            self._send_json(200, renderer.of_list(listed) if renderer else listed)
        elif method == "POST":
            fields = FieldValidation.from_params(params)
            created = operations.create(
                resource_type, parse_json(body), namespace=namespace or "", fields=fields
            )
            self._send_json(201, created, headers=_warning_headers(fields))
        elif method == "DELETE":
            listed = list_objects(
                operations.store,
                resource_type,
                namespace=namespace,
                params={k: v for k, v in params.items() if k != "limit"},
            )
            options = self._delete_options(params, body)
            deleted = []
            for item in listed["items"]:
                meta = item["metadata"]
                try:
                    operations.delete(
                        ObjectRef(resource_type, meta.get("namespace", ""), meta["name"]), options
                    )
                except ApiError as error:
                    if error.code != 404:
                        raise
                deleted.append(item)
            listed["items"] = deleted
            self._send_json(200, listed)
        else:
            raise ApiError(405, f"method {method} is not allowed on a collection")

    def _serve_watch(
        self, resource_type: ResourceType, namespace: str | None, *, params: dict[str, str]
    ) -> None:
        application = self.server.application
        store = application.operations.store
        try:
            timeout = float(params.get("timeoutSeconds") or DEFAULT_WATCH_SECONDS)
        except ValueError as error:
            raise ApiError(400, "timeoutSeconds must be a number") from error
        try:
            opened = open_watch(store, resource_type, namespace=namespace, params=params)
        except ApiError as error:
            if error.code != 410:
                raise
            # Like the watch cache: the stream opens, then carries a 410 ERROR event.
            self._start_stream()
            self._write_chunk(encode_event("ERROR", expired_watch_event(error)["object"]))
            self._end_stream()
            return
        bookmarks = params.get("allowWatchBookmarks", "").lower() in _TRUE
        renderer = self._table_renderer(resource_type, params)
        self._start_stream()
        try:
            stream_events(
                store=store,
                resource_type=resource_type,
                opened=opened,
                timeout_seconds=timeout,
                bookmark_seconds=application.bookmark_seconds if bookmarks else None,
                write_chunk=self._write_chunk,
                client_gone=lambda: client_has_gone(self.connection),
                stopping=application.stopping,
                transform=renderer.of_event if renderer else None,
            )
            self._end_stream()
        except OSError:
            self.close_connection = True

    def _table_renderer(
        self, resource_type: ResourceType, params: dict[str, str]
    ) -> TableRenderer | None:
        """A renderer when the client asked for ``as=Table`` (kubectl get), else None."""
        version = wants_table(self.headers.get("Accept") or "")
        if version is None:
            return None
        operations = self.server.application.operations
        crd = (
            operations.store.get(CRD_STORAGE, ("", resource_type.storage))
            if resource_type.custom
            else None
        )
        return TableRenderer(
            resource_type,
            crd=crd,
            include_object=params.get("includeObject"),
            version=version,
            now=parse_time(operations.now()),
        )

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True
