"""A loopback Kubernetes API server for tests and the embedded demo.

It speaks real HTTP/JSON to the official ``kubernetes`` client: core, apps,
batch, events and CRD-defined resources with /status and /scale subresources,
label/field selectors, resourceVersion conflicts, merge/strategic/JSON patch,
watch with resume and 410 Gone, limit/continue paging; plus simulated
Deployment/ReplicaSet/StatefulSet/Job controllers and a best-fit scheduler.

Usage::

    from kubernetes import client
    from trainscaler_sim.apiserver import LoopbackApiServer

    with LoopbackApiServer(port=0) as server:      # controllers + scheduler on
        for index in range(4):
            server.add_node(f"node-{index}", cpu="8", memory="32Gi", gpus=4)
        apps = client.AppsV1Api(server.api_client())
        ...
        server.write_kubeconfig("/tmp/kubeconfig")   # for KUBECONFIG users
        server.request_counts()[("patch", "deployments/scale")]
        server.inject_faults(verb="patch", rate=0.3, codes=(409, 500), seed=0)

Also: ``wait_idle(timeout)`` (controllers caught up), ``compact()`` (older
resourceVersions now 410), ``store.items(storage, namespace)`` for in-process
reads that stay out of the request counts (storage names look like "pods",
"deployments.apps", "elasticjobs.<group>"), and the keyword options
``history_limit`` and ``bookmark_seconds``.

Deliberate simplifications: pods start Running and Ready as soon as they are
bound and are deleted at once (no grace period); a template change replaces
pods Recreate-style; server-side apply (415), dryRun (400) and protobuf
bodies (415) are refused.

For kubectl: OpenAPI v2 (JSON) and v3 (``openapi``), Tables for ``as=Table``
(``tables``, ``printers``), and CRD schema pruning, defaulting, validation and
CEL rules on writes (``admission``, ``schema_validation``, ``cel_rules``).

Command line: ``python -m trainscaler_sim.apiserver --port 0 --nodes 4 --gpus 4 --kubeconfig PATH``.
"""

from .server import LoopbackApiServer

__all__ = ["LoopbackApiServer"]
