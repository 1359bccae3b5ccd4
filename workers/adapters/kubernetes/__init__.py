"""The Kubernetes adapter: ElasticJob CRD, list-and-watch cache, reader, scaler.

Entry points for the runtime (``workers/wiring.py``):

- ``build_cluster_reader(settings)`` -> ``ClusterReader`` over a watch cache;
- ``build_replica_scaler(settings)`` -> ``ReplicaScaler`` (Scale / Job parallelism);
- ``KubeAdapter(settings)`` when one process wants both on one client and
  one cache (``adapter.cluster_reader()``, ``adapter.replica_scaler()``,
  ``adapter.autoscaler()``).
"""

from __future__ import annotations

import threading

from kubernetes import client as k8s_client

from scheduler_core.models import DEFAULT_GPU_RESOURCE
from scheduler_core.ports import Clock
from workers.adapters.kubernetes.autoscaler import Autoscaler, RoundResult
from workers.adapters.kubernetes.cache import (
    NON_TERMINATED_PODS,
    Backoff,
    CacheNotSyncedError,
    ClusterCache,
    Informer,
    ScopedInformer,
    StoreListener,
    Watched,
)
from workers.adapters.kubernetes.client import (
    KubeClient,
    MonotonicClock,
    Observe,
    WallClock,
    build_kube_client,
)
from workers.adapters.kubernetes.cluster_index import ClusterIndex
from workers.adapters.kubernetes.crd import ELASTICJOB_CRD, install_crd
from workers.adapters.kubernetes.kinds import (
    ELASTICJOBS,
    NODES,
    PODS,
    WATCHED_TARGETS,
    ResourceKind,
)
from workers.adapters.kubernetes.reader import KubeClusterReader
from workers.adapters.kubernetes.scaler import KubeReplicaScaler
from workers.settings import Settings

__all__ = [
    "ELASTICJOB_CRD",
    "Autoscaler",
    "CacheNotSyncedError",
    "KubeAdapter",
    "KubeClusterReader",
    "KubeReplicaScaler",
    "RoundResult",
    "build_cache",
    "build_cluster_reader",
    "build_replica_scaler",
    "build_scaler",
    "install_crd",
]


def build_cache(
    client: KubeClient,
    *,
    namespaces: tuple[str, ...] = (),
    watch_timeout_seconds: int = 300,
    backoff: Backoff | None = None,
    gpu_resource: str = DEFAULT_GPU_RESOURCE,
) -> ClusterCache:
    """Informers for nodes, live pods (cluster-wide, read-only: they all use
    capacity), ElasticJobs and the workload kinds a job may target (watched
    only in ``namespaces``; every namespace when empty). The node and pod
    informers feed the cache's ``ClusterIndex``."""
    delays = backoff or Backoff()
    index = ClusterIndex(gpu_resource=gpu_resource)

    def informer(
        kind: ResourceKind,
        *,
        scope: str | None = None,
        fields: str | None = None,
        listener: StoreListener | None = None,
    ) -> Informer:
        return Informer(
            client,
            kind,
            namespace=scope,
            field_selector=fields,
            watch_timeout_seconds=watch_timeout_seconds,
            backoff=delays,
            listener=listener,
        )

    def scoped(kind: ResourceKind) -> Watched:
        if not namespaces:
            return informer(kind)
        if len(namespaces) == 1:
            return informer(kind, scope=namespaces[0])
        return ScopedInformer(kind, [informer(kind, scope=n) for n in namespaces])

    return ClusterCache(
        [
            informer(NODES, listener=index.node_listener),
            informer(PODS, fields=NON_TERMINATED_PODS, listener=index.pod_listener),
            scoped(ELASTICJOBS),
            *(scoped(kind) for kind in WATCHED_TARGETS),
        ],
        index=index,
    )


class KubeAdapter:
    """One client and one cache for a process, created on first use."""

    def __init__(
        self,
        settings: Settings,
        *,
        api_client: k8s_client.ApiClient | None = None,
        clock: Clock | None = None,
        wall_clock: Clock | None = None,
        observe: Observe | None = None,
    ) -> None:
        self._settings = settings
        self._observe = observe
        self._api_client = api_client
        self._clock = clock or MonotonicClock()
        self._wall_clock = wall_clock or WallClock()
        self._client: KubeClient | None = None
        self._cache: ClusterCache | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> KubeClient:
        with self._lock:
            if self._client is None:
                self._client = build_kube_client(
                    self._settings,
                    clock=self._clock,
                    api_client=self._api_client,
                    observe=self._observe,
                )
            return self._client

    @property
    def cache(self) -> ClusterCache:
        client = self.client
        with self._lock:
            if self._cache is None:
                self._cache = build_cache(
                    client,
                    namespaces=self._settings.namespaces,
                    watch_timeout_seconds=self._settings.kube_watch_timeout_seconds,
                    gpu_resource=self._settings.gpu_resource,
                )
            return self._cache

    def cluster_reader(self) -> KubeClusterReader:
        return KubeClusterReader(
            self.cache,
            self.client,
            gpu_resource=self._settings.gpu_resource,
            sync_timeout=self._settings.kube_cache_sync_timeout,
            default_policy=self._settings.cluster_policy,
        )

    def replica_scaler(self) -> KubeReplicaScaler:
        with self._lock:
            cache = self._cache
        return KubeReplicaScaler(
            self.client,
            clock=self._wall_clock,
            elastic_jobs=cache.informer(ELASTICJOBS) if cache is not None else None,
            component=self._settings.kube_field_manager,
            namespaces=self._settings.namespaces,
        )

    def autoscaler(self, *, max_load_desired: float | None = None) -> Autoscaler:
        reader = self.cluster_reader()
        return Autoscaler(
            reader,
            self.replica_scaler(),
            max_load_desired=(
                self._settings.max_load_desired if max_load_desired is None else max_load_desired
            ),
            clock=self._wall_clock,
        )

    def close(self) -> None:
        with self._lock:
            cache, client = self._cache, self._client
            self._cache = self._client = None
        if cache is not None:
            cache.stop()
        if client is not None:
            client.close()


def build_cluster_reader(
    settings: Settings, *, observe: Observe | None = None
) -> KubeClusterReader:
    """The runtime's ``ClusterReader``: its cache starts on the first read.

    ``observe`` is told of every API request (verb, status code or "error").
    """
    return KubeAdapter(settings, observe=observe).cluster_reader()


def build_replica_scaler(
    settings: Settings, *, observe: Observe | None = None
) -> KubeReplicaScaler:
    """The runtime's ``ReplicaScaler`` (no cache: reads what it writes with GETs)."""
    return KubeAdapter(settings, observe=observe).replica_scaler()


# The name ``workers/wiring.py`` imports.
build_scaler = build_replica_scaler
