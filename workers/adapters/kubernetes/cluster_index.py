"""The planner's cluster view, kept up to date from watch events.

The node and pod informers tell a ``ClusterIndex`` of every change to their
stores (a re-LIST replaces a store; a watch event puts or removes one
object). The index keeps two things, so that an autoscale round reads them
in O(jobs + nodes) instead of recounting every pod:

- the resource ledger (``scheduler_core.ledger.ClusterLedger``): cluster
  totals and each node's room, the ``inquire`` snapshot;
- ``PodsBySelector``: each namespace's pods, also by label (key, value), so
  the pods of a job's target are found from the smallest label bucket its
  selector names, and a job whose bucket did not change since the last round
  is answered from memory.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core.accounting import pod_is_unschedulable
from scheduler_core.ledger import ClusterLedger
from scheduler_core.models import DEFAULT_GPU_RESOURCE, ClusterResource
from workers.adapters.kubernetes.jobs import TargetPods, placement_of
from workers.adapters.kubernetes.selectors import Selector

JsonObject = Mapping[str, Any]
# A bucket of pods: (namespace, label key, label value), or (namespace,) for all of them.
Bucket = tuple[Any, ...]


@dataclass(frozen=True, eq=False, slots=True)
class _Pod:
    namespace: Any
    labels: Any
    unschedulable: bool
    # The pod's place in the informer's store order (first put; kept on update).
    order: int
    pod: JsonObject

    def buckets(self) -> list[Bucket]:
        found: list[Bucket] = [(self.namespace,)]
        if isinstance(self.labels, Mapping):
            found.extend(
                (self.namespace, key, value)
                for key, value in self.labels.items()
                if isinstance(value, str)
            )
        return found


class PodsBySelector:
    """Pods by namespace and by label, answering "the pods of this target"."""

    def __init__(self) -> None:
        self._order = itertools.count()
        self._pods: dict[str, _Pod] = {}
        self._buckets: dict[Bucket, dict[str, _Pod]] = {}
        # bucket -> tick of its last change; ticks only grow, so a remembered tick
        # equal to the current one means no pod of the bucket changed since.
        self._tick = itertools.count(1)
        self._changed: dict[Bucket, int] = {}
        self._memo: dict[tuple[str, Selector], tuple[Bucket, int, TargetPods]] = {}

    def put(self, key: str, pod: JsonObject) -> None:
        old = self._pods.get(key)
        if old is not None:
            self._unfile(key, old)
        meta = pod.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        entry = _Pod(
            # As ``jobs.pods_of``: a pod without a namespace field is in "default".
            namespace=meta.get("namespace", "default"),
            labels=meta.get("labels"),
            unschedulable=pod_is_unschedulable(pod),
            order=old.order if old is not None else next(self._order),
            pod=pod,
        )
        self._pods[key] = entry
        tick = next(self._tick)
        for bucket in entry.buckets():
            self._buckets.setdefault(bucket, {})[key] = entry
            self._changed[bucket] = tick

    def remove(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            self._unfile(key, old)

    def replace(self, pods: Iterable[tuple[str, JsonObject]]) -> None:
        self._pods = {}
        self._buckets = {}
        self._changed = {}
        self._memo = {}
        for key, pod in pods:
            self.put(key, pod)

    def _unfile(self, key: str, old: _Pod) -> None:
        tick = next(self._tick)
        for bucket in old.buckets():
            members = self._buckets.get(bucket)
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self._buckets[bucket]
            self._changed[bucket] = tick

    def pods_of_each(self, targets: Sequence[tuple[str, Selector]]) -> list[TargetPods]:
        """For each (namespace, selector): its pods, as ``jobs.pods_of`` finds them.

        Remembers the answers of this call only (a job gone is forgotten).
        """
        memo: dict[tuple[str, Selector], tuple[Bucket, int, TargetPods]] = {}
        answers = []
        for target in targets:
            known = memo.get(target) or self._memo.get(target)
            if known is None or self._changed.get(known[0], 0) != known[1]:
                known = self._find(*target)
            memo[target] = known
            answers.append(known[2])
        self._memo = memo
        return answers

    def _find(self, namespace: str, selector: Selector) -> tuple[Bucket, int, TargetPods]:
        # Every pod the selector matches carries each of its single-value
        # ``In`` labels: the smallest such bucket holds them all.
        buckets: list[Bucket] = [(namespace,)] + [
            (namespace, r.key, value)
            for r in selector.requirements
            if r.operator == "In" and len(r.values) == 1
            for value in r.values
        ]
        bucket = min(buckets, key=lambda b: len(self._buckets.get(b, ())))
        if selector.matches_nothing:
            bucket = (namespace,)
            found: list[_Pod] = []
        else:
            members = self._buckets.get(bucket, {})
            found = [pod for pod in members.values() if selector.matches(pod.labels)]
        first = min(found, key=lambda pod: pod.order, default=None)
        pods = TargetPods(
            count=len(found),
            unschedulable=sum(1 for pod in found if pod.unschedulable),
            first=first.pod if first is not None else None,
            placement=placement_of([pod.pod for pod in found]),
        )
        return bucket, self._changed.get(bucket, 0), pods


class _Listener:
    """One informer's store changes, applied to the index under its lock."""

    def __init__(self, lock: threading.Lock, *, put: Any, remove: Any, replace: Any) -> None:
        self._lock = lock
        self._put, self._remove, self._replace = put, remove, replace

    def put(self, key: str, obj: JsonObject) -> None:
        with self._lock:
            self._put(key, obj)

    def removed(self, key: str) -> None:
        with self._lock:
            self._remove(key)

    def replaced(self, items: Mapping[str, JsonObject]) -> None:
        with self._lock:
            self._replace(items.items())


class ClusterIndex:
    """The ledger and the pod index, fed by the node and pod informers."""

    def __init__(self, *, gpu_resource: str = DEFAULT_GPU_RESOURCE) -> None:
        self._lock = threading.Lock()
        self._ledger = ClusterLedger(gpu_resource=gpu_resource)
        self._pods = PodsBySelector()

        def put_pod(key: str, pod: JsonObject) -> None:
            self._ledger.put_pod(key, pod)
            self._pods.put(key, pod)

        def remove_pod(key: str) -> None:
            self._ledger.remove_pod(key)
            self._pods.remove(key)

        def replace_pods(pods: Iterable[tuple[str, JsonObject]]) -> None:
            items = list(pods)
            self._ledger.replace_pods(items)
            self._pods.replace(items)

        self.node_listener = _Listener(
            self._lock,
            put=self._ledger.put_node,
            remove=self._ledger.remove_node,
            replace=self._ledger.replace_nodes,
        )
        self.pod_listener = _Listener(
            self._lock, put=put_pod, remove=remove_pod, replace=replace_pods
        )

    def snapshot(self) -> ClusterResource:
        with self._lock:
            return self._ledger.snapshot()

    def pods_of_each(self, targets: Sequence[tuple[str, Selector]]) -> list[TargetPods]:
        with self._lock:
            return self._pods.pods_of_each(targets)
