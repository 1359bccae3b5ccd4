"""trainscaler's runtime: Celery app, tasks, adapters, API and CLI.

``celery -A workers worker`` finds the Celery app here.
"""

from workers.celery_app import app as celery_app

app = celery_app
__all__ = ["app", "celery_app"]
