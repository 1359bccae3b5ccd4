"""The ``ElasticJob`` custom resource definition, as data, and its installer.

``deploy/crd.yaml`` is this dict written out (``python -m
workers.adapters.kubernetes.crd > deploy/crd.yaml``); a unit test keeps the two
identical.
"""

from __future__ import annotations

import json
import sys
from typing import Any

GROUP = "trainscaler.io"
VERSION = "v1alpha1"
KIND = "ElasticJob"
PLURAL = "elasticjobs"
SINGULAR = "elasticjob"
SHORT_NAMES = ("ej",)
CRD_NAME = f"{PLURAL}.{GROUP}"

_CONDITION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "status"],
    "properties": {
        "type": {"type": "string", "enum": ["Ready", "ScalingActive", "ScalingLimited"]},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
    },
}

_SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "How far trainscaler may scale the target workload, and with which policy.",
    "required": ["scaleTargetRef", "maxReplicas"],
    # The invariant 0 <= min <= max; minimum: 0 covers the first half.
    "x-kubernetes-validations": [
        {
            "rule": "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",
            "message": "minReplicas must be less than or equal to maxReplicas",
        }
    ],
    "properties": {
        "scaleTargetRef": {
            "type": "object",
            "description": "The workload whose replicas are scaled (like HPA and KEDA).",
            "required": ["apiVersion", "kind", "name"],
            "properties": {
                "apiVersion": {
                    "type": "string",
                    "minLength": 1,
                    "description": "API version of the target, e.g. apps/v1.",
                },
                "kind": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Deployment, StatefulSet, ReplicaSet, Job (batch/v1), "
                    "or a custom resource with a /scale subresource.",
                },
                "name": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Name of the target, in the ElasticJob's namespace.",
                },
            },
        },
        "minReplicas": {
            "type": "integer",
            "format": "int32",
            "minimum": 0,
            "default": 1,
            "description": "Fewest replicas the target is scaled to (at most maxReplicas).",
        },
        "maxReplicas": {
            "type": "integer",
            "format": "int32",
            "minimum": 0,
            "description": "Most replicas the target is scaled to.",
        },
        "policy": {
            "type": "string",
            "minLength": 1,
            "description": (
                "The cluster policy that plans this job; omitted: the runtime's "
                "TRAINSCALER_CLUSTER_POLICY (default goodput) for a job with GPUs, "
                "edl for one without."
            ),
        },
        "application": {
            "type": "string",
            "minLength": 1,
            "maxLength": 253,
            "pattern": "^[^\\s]+$",
            "description": (
                "The training program and its configuration, e.g. 'yolov3/batch-64': "
                "jobs of one application are expected to scale alike (goodput starts "
                "a new job from what earlier ones measured)."
            ),
        },
        "epochs": {
            "type": "integer",
            "format": "int32",
            "minimum": 1,
            "description": "Epochs the job trains for (N): goodput's remaining-work estimate.",
        },
        "defaultParallelism": {
            "type": "integer",
            "format": "int32",
            "minimum": 1,
            "default": 1,
            "description": "The replicas the user asks for (goodput's size for a job it "
            "knows nothing of; KubeML's first parallelism).",
        },
        "paused": {
            "type": "boolean",
            "default": False,
            "description": "Operator's manual override: no scaling while true.",
        },
    },
}

_STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "What trainscaler last did; written only by the scaler, through /status.",
    "properties": {
        "currentReplicas": {
            "type": "integer",
            "format": "int32",
            "minimum": 0,
            "description": "Replicas of the target after the last scale.",
        },
        "desiredReplicas": {
            "type": "integer",
            "format": "int32",
            "minimum": 0,
            "description": "What trainscaler asked for, within [minReplicas, maxReplicas].",
        },
        "lastScaleTime": {
            "type": "string",
            "format": "date-time",
            "description": "When the replica count last changed.",
        },
        "lastDecision": {
            "type": "object",
            "description": "The last decision's policy, rule (e.g. edl.scale_up) and reason.",
            "properties": {
                "policy": {"type": "string"},
                "rule": {"type": "string"},
                "reason": {"type": "string"},
            },
        },
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "conditions": {
            "type": "array",
            "items": _CONDITION_SCHEMA,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    },
}


def _printer_column(name: str, kind: str, *, path: str) -> dict[str, str]:
    return {"name": name, "type": kind, "jsonPath": path}


ELASTICJOB_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": PLURAL,
            "singular": SINGULAR,
            "kind": KIND,
            "listKind": f"{KIND}List",
            "shortNames": list(SHORT_NAMES),
            "categories": ["trainscaler"],
        },
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                # Status is written only through /status (by the scaler).
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    _printer_column("Min", "integer", path=".spec.minReplicas"),
                    _printer_column("Max", "integer", path=".spec.maxReplicas"),
                    _printer_column("Current", "integer", path=".status.currentReplicas"),
                    _printer_column("Desired", "integer", path=".status.desiredReplicas"),
                    _printer_column("Policy", "string", path=".spec.policy"),
                    _printer_column("Age", "date", path=".metadata.creationTimestamp"),
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "description": "An elastic training job: a workload whose replicas "
                        "trainscaler sets within bounds, by a scaling policy.",
                        "required": ["spec"],
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": _SPEC_SCHEMA,
                            "status": _STATUS_SCHEMA,
                        },
                    }
                },
            }
        ],
    },
}

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install_crd(api_client: Any) -> dict[str, Any]:
    """Create the CRD, or replace it when it exists; returns the server's object.

    ``api_client`` is the official ``kubernetes.client.ApiClient``. Run by an
    operator (or the demo), never by the autoscaler: its ClusterRole has no
    rights on CRDs.
    """
    from workers.adapters.kubernetes.client import KubeApiError, KubeClient

    client = KubeClient(api_client)
    try:
        return client.request("POST", CRD_PATH, body=ELASTICJOB_CRD)
    except KubeApiError as error:
        if error.status != 409:
            raise
    current = client.request("GET", f"{CRD_PATH}/{CRD_NAME}")
    replacement = json.loads(json.dumps(ELASTICJOB_CRD))
    replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return client.request("PUT", f"{CRD_PATH}/{CRD_NAME}", body=replacement)


def render_yaml() -> str:
    """The CRD as YAML, exactly what ``deploy/crd.yaml`` holds."""
    import yaml

    header = "# Generated by `python -m workers.adapters.kubernetes.crd`; do not edit.\n"
    return header + yaml.safe_dump(ELASTICJOB_CRD, sort_keys=False)


if __name__ == "__main__":
    sys.stdout.write(render_yaml())
