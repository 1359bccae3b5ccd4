"""A stand-in for KubeML's parameter server: where scaling decisions of API jobs land.

A train request submitted with ``ps_url`` pointing here is scaled by telling
this server: the first decision (``CreateTask``) arrives as KubeML's
``TrainTask`` JSON on ``/start`` (``job.id``, ``job.state.parallelism``), later
ones (``UpdateTask``) as a ``JobState`` on ``/update/{id}``. Any POST path is accepted (KubeML's ``/start`` and
``/update/{taskId}`` alike); the newest parallelism per job id is kept for the
simulated job to pick up. Loopback only, port chosen by the kernel.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainscaler_sim.embedded.api_client import find_int, find_str

_MAX_BODY = 1_048_576


class ParallelismBoard:
    """Newest parallelism per job id, with a condition to wait on."""

    def __init__(self) -> None:
        self._values: dict[str, int] = {}
        self._calls: dict[str, int] = {}
        self._changed = threading.Condition()

    def set(self, job_id: str, parallelism: int) -> None:
        with self._changed:
            self._values[job_id] = parallelism
            self._calls[job_id] = self._calls.get(job_id, 0) + 1
            self._changed.notify_all()

    def get(self, job_id: str) -> int | None:
        with self._changed:
            return self._values.get(job_id)

    def calls(self, job_id: str) -> int:
        with self._changed:
            return self._calls.get(job_id, 0)

    def wait_for(self, job_id: str, *, timeout: float) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: job_id in self._values, timeout=timeout)
            return self._values.get(job_id)


def _handler(board: ParallelismBoard) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._answer(413, {"error": "body too large"})
                return
            try:
                task: Any = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._answer(400, {"error": "body is not JSON"})
                return
            # KubeML's /start carries a TrainTask ({"job": {"id": ...}}); its
            # /update/{id} a bare JobState, the id in the path.
            job_id = (
                find_str(task.get("job") if isinstance(task, dict) else None, "id")
                or find_str(task, "job_id", "jobId")
                or self.path.rstrip("/").rpartition("/")[2]
            )
            parallelism = find_int(task, "parallelism")
            if not job_id or parallelism is None or parallelism < 0:
                self._answer(422, {"error": "expected a TrainTask with job_id and parallelism"})
                return
            board.set(job_id.rpartition("/")[2], parallelism)
            self._answer(200, {"ok": True})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


class ParameterServer:
    """The HTTP server, on a thread; ``url`` is what train requests carry as ``ps_url``."""

    def __init__(self, board: ParallelismBoard, *, host: str = "127.0.0.1") -> None:
        self.board = board
        self._server = ThreadingHTTPServer((host, 0), _handler(board))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="embedded-ps", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ParameterServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
