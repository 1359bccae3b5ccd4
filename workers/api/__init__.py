"""The HTTP API (FastAPI): KubeML's scheduler routes plus read-only views.

``create_app(settings)`` in ``workers.api.app`` builds the application; the
routers live one concern per module (``kubeml``, ``views``, ``ops``), the
request-id, body-size and metrics middleware in ``middleware``, bearer-token
authentication in ``auth`` and the error shapes in ``errors``. Run it with
``trainscaler api`` (uvicorn).
"""
