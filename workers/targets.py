"""Whether a job's decisions can land anywhere: its scaling target.

A train request is scaled through its parameter server when it carries
``ps_url`` (KubeML's ``psUrl``); otherwise through the ElasticJob named by its
key, on the Kubernetes scaler (the recording scaler keeps any target). A
request with neither can never be scaled: ``submit`` refuses it with this
module's reason instead of dead-lettering every decision later, and the job
views show such a job as waiting for its ElasticJob.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Protocol, runtime_checkable

from scheduler_core.models import TrainRequest
from scheduler_core.ports import ClusterReader

log = logging.getLogger(__name__)


def has_parameter_server(request: TrainRequest | None) -> bool:
    return bool(request is not None and request.ps_url)


def missing_target(
    request: TrainRequest,
    *,
    job: str,
    scaler: str,
    elastic_jobs: Collection[str],
) -> str | None:
    """Why ``job``'s decisions could never be applied, or None when they can.

    ``elastic_jobs``: keys (``namespace/name``) of the ElasticJobs in the cluster.
    """
    if has_parameter_server(request) or scaler != "kubernetes" or job in elastic_jobs:
        return None
    return (
        f"no scaling target for {job}: the request has no ps_url (KubeML psUrl) and there "
        f"is no ElasticJob {job}; give ps_url (trainscaler submit --ps-url URL) so decisions "
        "go to the job's parameter server, or create the ElasticJob first"
    )


class NoTargetError(ValueError):
    """A submission whose decisions could never be applied (see ``missing_target``)."""


def elastic_job_keys(reader: ClusterReader) -> frozenset[str] | None:
    """Keys of the cluster's ElasticJobs; None when the cluster cannot be read now."""
    try:
        return frozenset(job.key for job in reader.elastic_jobs())
    except Exception:  # any adapter failure: unknown, and the caller must not guess "missing"
        log.warning("could not list ElasticJobs", exc_info=True)
        return None


@runtime_checkable
class ElasticJobLookup(Protocol):
    """A reader that answers for one job with a targeted read instead of a listing."""

    def has_elastic_job(self, key: str) -> bool: ...


def _known_keys(reader: ClusterReader, job: str) -> Collection[str] | None:
    """The keys ``job`` is checked against; None when the cluster cannot be read now."""
    if not isinstance(reader, ElasticJobLookup):
        return elastic_job_keys(reader)
    try:
        return {job} if reader.has_elastic_job(job) else set()
    except Exception:  # any adapter failure: unknown, as for a listing
        log.warning("could not read ElasticJob %s", job, exc_info=True)
        return None


def check_target(request: TrainRequest, *, job: str, scaler: str, reader: ClusterReader) -> None:
    """Raise ``NoTargetError`` with the reason when ``job`` could never be scaled."""
    if has_parameter_server(request) or scaler != "kubernetes":
        return
    keys = _known_keys(reader, job)
    if keys is None:
        return  # unknown now: accepted; the job views show it once the cluster answers
    reason = missing_target(request, job=job, scaler=scaler, elastic_jobs=keys)
    if reason is not None:
        raise NoTargetError(reason)
