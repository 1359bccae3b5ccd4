"""Observability shared by the workers and the API: Prometheus metrics and logging.

* ``workers.observability.metrics``: the counters and histograms each process
  keeps in memory (``RuntimeMetrics``, the ``record_*`` calls the runtime
  makes; ``ApiMetrics``), on the ``CollectorRegistry`` the caller passes.
* ``workers.observability.runtime_gauges``: the gauges the API computes from
  Redis at scrape time (queues, dead letters, per-job replicas).
* ``workers.observability.worker_exposition``: a worker pod's ``/metrics``
  listener (multiprocess mode for prefork children), driven by Celery signals.
* ``workers.observability.logs``: JSON lines or readable text, by setting.
"""
