"""Root CA publisher: a ``kube-root-ca.crt`` ConfigMap in every namespace.

kube-controller-manager's root-ca-cert-publisher puts the cluster CA bundle
into each namespace (pods mount it with their service-account token) and puts
it back when it is deleted, so every namespace of a real cluster lists it
among its ConfigMaps. The loopback server has no CA: the bundle is a stand-in.
"""

from __future__ import annotations

from ..json_types import JsonObject
from ..operations import ApiOperations
from ..store import StoreEvent

NAME = "kube-root-ca.crt"
NAMESPACES = "namespaces"
CONFIGMAPS = "configmaps"
STAND_IN_BUNDLE = (
    "-----BEGIN CERTIFICATE-----\n"
    "bG9vcGJhY2stYXBpc2VydmVyIGhhcyBubyBDQQ==\n"
    "-----END CERTIFICATE-----\n"
)


class RootCAPublisher:
    def __init__(self, operations: ApiOperations) -> None:
        self.operations = operations
        self.store = operations.store
        self.configmaps = operations.resource("", "v1", plural=CONFIGMAPS)
        # Namespaces that exist before the controllers start get theirs too.
        existing, _ = self.store.items(NAMESPACES, None)
        self._dirty: dict[str, None] = {item["metadata"]["name"]: None for item in existing}

    def observe(self, event: StoreEvent) -> None:
        if event.storage == NAMESPACES and event.type != "DELETED":
            self._dirty[event.obj["metadata"]["name"]] = None
        elif (
            event.storage == CONFIGMAPS
            and event.type == "DELETED"
            and event.obj["metadata"]["name"] == NAME
        ):
            self._dirty[event.namespace] = None

    def reconcile(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for namespace in dirty:
            owner = self.store.get(NAMESPACES, ("", namespace))
            if owner is None or _terminating(owner):
                continue
            if self.store.get(CONFIGMAPS, (namespace, NAME)) is None:
                body: JsonObject = {
                    "metadata": {
                        "name": NAME,
                        "annotations": {
                            "kubernetes.io/description": "Contains a CA bundle that can be "
                            "used to verify the kube-apiserver when using internal endpoints "
                            "such as the internal service IP or kubernetes.default.svc. No "
                            "other usage is guaranteed across distributions of Kubernetes "
                            "clusters."
                        },
                    },
                    "data": {"ca.crt": STAND_IN_BUNDLE},
                }
                self.operations.create_stored(self.configmaps, body, namespace=namespace)


def _terminating(namespace: JsonObject) -> bool:
    meta = namespace.get("metadata") or {}
    return (
        bool(meta.get("deletionTimestamp"))
        or (namespace.get("status") or {}).get("phase") == "Terminating"
    )
