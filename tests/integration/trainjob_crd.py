"""A custom scale target for tests: the ``TrainJob`` CRD (``example.com/v1``) with a
``/scale`` subresource, as a user's training operator would install it."""

from __future__ import annotations

from typing import Any

from workers.adapters.kubernetes.kinds import ResourceKind

TRAINJOB_GROUP, TRAINJOB_VERSION, TRAINJOB_PLURAL = "example.com", "v1", "trainjobs"
TRAINJOBS = ResourceKind(TRAINJOB_GROUP, TRAINJOB_VERSION, TRAINJOB_PLURAL, "TrainJob")
TRAINJOB_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{TRAINJOB_PLURAL}.{TRAINJOB_GROUP}"},
    "spec": {
        "group": TRAINJOB_GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": TRAINJOB_PLURAL,
            "singular": "trainjob",
            "kind": "TrainJob",
            "listKind": "TrainJobList",
        },
        "versions": [
            {
                "name": TRAINJOB_VERSION,
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
