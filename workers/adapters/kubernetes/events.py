"""core/v1 Events on ElasticJobs: ``ScaledUp``, ``ScaledDown``, ``ScaleFailed``.

Events are best effort, as in client-go's recorder: a failure to record one
is logged and never fails the scale it describes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from scheduler_core.ports import Clock
from workers.adapters.kubernetes.client import KubeApiError, KubeClient, KubeConnectionError
from workers.adapters.kubernetes.crd import GROUP, KIND, VERSION
from workers.adapters.kubernetes.kinds import EVENTS
from workers.adapters.kubernetes.status import rfc3339

log = logging.getLogger(__name__)

SCALED_UP = "ScaledUp"
SCALED_DOWN = "ScaledDown"
SCALE_FAILED = "ScaleFailed"

# The API server rejects longer event messages.
MAX_MESSAGE = 1024


class EventRecorder:
    def __init__(self, client: KubeClient, *, clock: Clock, component: str = "trainscaler") -> None:
        self._client = client
        self._clock = clock
        self._component = component

    def record(
        self,
        elastic_job: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        warning: bool = False,
    ) -> bool:
        """Create one Event on ``elastic_job``; False when the server refused it."""
        meta = elastic_job.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name"))
        timestamp = rfc3339(self._clock.now())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": "Warning" if warning else "Normal",
            "firstTimestamp": timestamp,
            "lastTimestamp": timestamp,
            "count": 1,
            "source": {"component": self._component},
            "reportingComponent": self._component,
        }
        try:
            self._client.request("POST", EVENTS.collection_path(namespace), body=body)
        except (KubeApiError, KubeConnectionError) as error:
            log.warning("event %s on %s/%s not recorded: %s", reason, namespace, name, error)
            return False
        return True
