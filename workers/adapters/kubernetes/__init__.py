"""The Kubernetes adapter: ElasticJob CRD, list-and-watch cache, reader, scaler.

Entry point for the runtime (``workers/wiring.py``): ``KubeAdapter(settings)``,
one per process: one rate-limited client (one token bucket: ``kube_qps`` is
the process's budget) shared by everything the process does, and

- ``adapter.cluster_reader()``: ``ClusterReader`` over the list-and-watch
  cache, built on first use; only the planner asks for it;
- ``adapter.direct_reader()``: ``ClusterReader`` with targeted LISTs and no
  cache (event workers, the API);
- ``adapter.replica_scaler()``: ``ReplicaScaler`` (Scale / Job parallelism),
  targeted reads and writes, no cache (scale workers);
- ``adapter.observed_elastic_job(key)``: the cache's copy of an ElasticJob
  (None when this process has no cache), which the planner hands on with
  its scale commands.
"""

from __future__ import annotations

import threading

from kubernetes import client as k8s_client

from scheduler_core.models import DEFAULT_GPU_RESOURCE
from scheduler_core.ports import Clock
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
    JsonObject,
    KubeClient,
    MonotonicClock,
    Observe,
    WallClock,
    build_kube_client,
)
from workers.adapters.kubernetes.cluster_index import ClusterIndex
from workers.adapters.kubernetes.crd import ELASTICJOB_CRD, install_crd
from workers.adapters.kubernetes.direct import DirectClusterReader
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
    "CacheNotSyncedError",
    "DirectClusterReader",
    "KubeAdapter",
    "KubeClusterReader",
    "KubeReplicaScaler",
    "build_cache",
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

    def direct_reader(self) -> DirectClusterReader:
        return DirectClusterReader(
            self.client,
            gpu_resource=self._settings.gpu_resource,
            namespaces=self._settings.namespaces,
            default_policy=self._settings.cluster_policy,
        )

    def replica_scaler(self) -> KubeReplicaScaler:
        return KubeReplicaScaler(
            self.client,
            clock=self._wall_clock,
            component=self._settings.kube_field_manager,
            namespaces=self._settings.namespaces,
        )

    def has_cache(self) -> bool:
        with self._lock:
            return self._cache is not None

    def observed_elastic_job(self, job: str) -> JsonObject | None:
        """The cache's copy of ElasticJob ``job`` (``ns/name``); None without a cache."""
        with self._lock:
            cache = self._cache
        if cache is None:
            return None
        namespace, _, name = job.partition("/")
        cached = cache.informer(ELASTICJOBS).get(namespace, name)
        if cached is None:
            return None
        # It travels in a Celery message: managedFields (kilobytes on a real server)
        # stay behind; a write without them keeps the server's own.
        meta = {k: v for k, v in (cached.get("metadata") or {}).items() if k != "managedFields"}
        return {**cached, "metadata": meta}

    def close(self) -> None:
        with self._lock:
            cache, client = self._cache, self._client
            self._cache = self._client = None
        if cache is not None:
            cache.stop()
        if client is not None:
            client.close()
