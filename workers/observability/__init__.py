"""Observability shared by the workers and the API: Prometheus metrics and logging.

* ``workers.observability.metrics``: cluster-wide counters kept in Redis
  (``MetricsRecorder``, the ``record_*`` calls the runtime makes) and the
  scrape-time collector that turns them and the runtime's state into
  Prometheus metrics on an explicit ``CollectorRegistry``.
* ``workers.observability.logs``: JSON lines or readable text, by setting.
"""
