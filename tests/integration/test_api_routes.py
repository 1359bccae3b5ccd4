"""Every API route over real HTTP: a uvicorn server, real Redis and a real Celery worker."""

from __future__ import annotations

import httpx
import pytest

from scheduler_core.models import (
    ClusterResource,
    Reason,
    ScalingDecision,
    ScalingPlan,
)
from tests.integration.api_fixtures import TOKEN, ApiStack, ServedApi, api_stack
from tests.integration.conftest import wait_for
from workers.adapters.state_records import PlanRecord
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode
from workers.api.app import create_app
from workers.api.auth import ApiConfigError
from workers.client import submission_job_id

pytestmark = pytest.mark.timeout(120)
__all__ = ["api_stack"]  # the module-scoped fixture, imported for pytest

KUBEML_TRAIN = {
    "model_type": "resnet34",
    "batch_size": 128,
    "epochs": 10,
    "dataset": "cifar10",
    "learning_rate": 0.01,
    "function_name": "resnet",
    "options": {
        "default_parallelism": 2,
        "static_parallelism": False,
        "validate_every": 1,
        "k": 8,
        "goal_accuracy": 90,
    },
    "min_replicas": 1,
    "max_replicas": 6,
}


def _train(api: httpx.Client, **overrides: object) -> dict[str, object]:
    response = api.post("/train", json={**KUBEML_TRAIN, **overrides})
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


# --- auth, request ids, OpenAPI -----------------------------------------------------


PROTECTED = [
    ("POST", "/train"),
    ("POST", "/job"),
    ("DELETE", "/finish/x"),
    ("GET", "/jobs"),
    ("GET", "/jobs/x"),
    ("GET", "/plan"),
    ("GET", "/queue"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_protected_routes_need_the_token(api_stack: ApiStack, method: str, path: str) -> None:
    with api_stack.client(token=None) as anonymous, api_stack.client(token="wrong") as wrong:
        for api in (anonymous, wrong):
            response = api.request(method, path, json={})
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.headers["x-request-id"]


def test_auth_disabled_serves_without_a_token(api_stack: ApiStack) -> None:
    with api_stack.client(auth=False) as api:
        assert api.get("/jobs").status_code == 200
        assert api.get("/queue").status_code == 200


def test_health_and_metrics_are_open(api_stack: ApiStack) -> None:
    with api_stack.client(token=None) as anonymous:
        assert anonymous.get("/health").status_code == 200
        assert anonymous.get("/metrics").status_code == 200


def test_an_api_without_a_token_refuses_to_start(api_stack: ApiStack) -> None:
    settings = api_stack.settings.model_copy(update={"api_token": None})
    with pytest.raises(ApiConfigError, match="TRAINSCALER_API_TOKEN"):
        create_app(settings, runtime=api_stack.runtime)


def test_every_response_carries_a_request_id(api_stack: ApiStack) -> None:
    with api_stack.client() as api:
        responses = [
            api.get("/jobs"),
            api.get("/nowhere"),
            api.post("/train", json={}),
            api.get("/jobs/no-such-job"),
            api.post("/train", content=b"x" * (api_stack.settings.api_max_body_bytes + 1)),
        ]
        assert [r.status_code for r in responses] == [200, 404, 422, 404, 413]
        ids = [r.headers["x-request-id"] for r in responses]
        assert all(ids) and len(set(ids)) == len(ids)
        echoed = api.get("/jobs", headers={"X-Request-ID": "trace-42"})
        assert echoed.headers["x-request-id"] == "trace-42"
        junk = api.get("/jobs", headers={"X-Request-ID": "bad id\twith spaces"})
        assert junk.headers["x-request-id"] != "bad id\twith spaces"


def test_openapi_lists_every_route(api_stack: ApiStack) -> None:
    with api_stack.client() as api:
        schema = api.get("/openapi.json").json()
    paths = set(schema["paths"])
    assert {
        "/train",
        "/job",
        "/finish/{task_id}",
        "/health",
        "/jobs",
        "/jobs/{job_id}",
        "/plan",
        "/queue",
        "/metrics",
    } <= paths


# --- limits and validation ----------------------------------------------------------


def test_bodies_over_the_limit_get_413_declared_or_chunked(api_stack: ApiStack) -> None:
    limit = api_stack.settings.api_max_body_bytes
    with api_stack.client() as api:
        declared = api.post("/job", content=b"{" + b" " * limit + b"}")
        assert declared.status_code == 413
        assert "TRAINSCALER_API_MAX_BODY_BYTES" in declared.json()["detail"]

        def chunks():  # no Content-Length: sent chunked
            for _ in range(limit // 65536 + 2):
                yield b" " * 65536

        chunked = api.post("/train", content=chunks())
        assert chunked.status_code == 413
        assert api.get("/health").status_code == 200


def test_invalid_input_gets_422_naming_the_fields(api_stack: ApiStack) -> None:
    with api_stack.client() as api:
        response = api.post(
            "/train",
            json={**KUBEML_TRAIN, "batch_size": 0, "epochs": "many", "dataset": None},
        )
        assert response.status_code == 422
        assert {"body.batch_size", "body.epochs", "body.dataset"} <= set(response.json()["fields"])
        bounds = api.post("/train", json={**KUBEML_TRAIN, "min_replicas": 5, "max_replicas": 2})
        assert bounds.status_code == 422
        assert "min_replicas (5) must be <= max_replicas (2)" in bounds.text
        not_json = api.post("/job", content=b"{nope", headers={"content-type": "application/json"})
        assert not_json.status_code == 422
        facts = api.post(
            "/job",
            json={
                "job_id": "facts",
                "parameters": KUBEML_TRAIN,
                "state": {"parallelism": 2, "epoch": -1, "iterations": "lots", "nodes": 0},
            },
        )
        assert facts.status_code == 422
        assert {"body.state.epoch", "body.state.iterations", "body.state.nodes"} <= set(
            facts.json()["fields"]
        )
        wait = api.post("/job?wait=99", json={})
        assert wait.status_code == 422 and "query.wait" in wait.json()["fields"]


# --- the KubeML routes -------------------------------------------------------------


def test_train_report_finish_the_kubeml_way(api_stack: ApiStack) -> None:
    with api_stack.client() as api:
        created = _train(api, namespace="ml")
        job, job_id = str(created["job"]), str(created["job_id"])
        assert job == f"ml/{job_id}"
        assert job_id == submission_job_id(str(created["task_id"]))
        assert created["recorded"] is True and created["poll"] == f"/jobs/{job}"

        # The first decision admits the job from the wait queue; the worker scales it.
        admitted = wait_for(
            lambda: api.get(f"/jobs/{job}").json()["replicas"], timeout=20, what="admission"
        )
        assert 1 <= admitted <= 6

        # KubeML's parameter server reports an epoch: its TrainTask with state.
        task = {
            "job_id": job_id,
            "parameters": {**KUBEML_TRAIN, "namespace": "ml"},
            "state": {"parallelism": admitted, "elapsed_time": 42.5},
        }
        answer = api.post("/job", json=task)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["job"] == job and body["decided"] is True
        assert 1 <= body["parallelism"] <= 6
        assert body["reason"]["rule"] and body["reason"]["message"]

        detail = api.get(f"/jobs/{job_id}").json()  # a bare id resolves too
        assert detail["job"] == job
        assert detail["min_replicas"] == 1 and detail["max_replicas"] == 6
        assert detail["recent_epochs"][0]["epoch_time_s"] == 42.5
        assert detail["recent_epochs"][0]["epochs_per_hour"] == pytest.approx(3600 / 42.5)
        assert detail["decisions"] and all(d["rule"] for d in detail["decisions"])
        assert detail["request"]["model_type"] == "resnet34"

        summaries = {s["job"]: s for s in api.get("/jobs").json()}
        assert summaries[job]["desired"] == detail["decisions"][0]["target"]

        finished = api.delete(f"/finish/{job_id}", params={"namespace": "ml"})
        assert finished.status_code == 200, finished.text
        assert finished.json()["finished"] is True
        again = api.delete(f"/finish/{job}")
        assert again.status_code == 200 and again.json()["finished"] is True
        assert api.get(f"/jobs/{job}").json()["finished"] is True


def test_a_report_not_decided_in_time_gets_202_with_a_poll_url(api_stack: ApiStack) -> None:
    with api_stack.client() as api:
        task = {
            "job_id": "slow-one",
            "parameters": KUBEML_TRAIN,
            "state": {"parallelism": 2, "elapsed_time": 10.0},
        }
        answer = api.post("/job", json=task, params={"wait": 0})
        assert answer.status_code == 202
        assert answer.json() == {
            "job": "default/slow-one",
            "decided": False,
            "parallelism": None,
            "reason": None,
            "generation": None,
            "poll": "/jobs/default/slow-one",
        }
        # The worker decides it anyway; the poll URL shows it.
        wait_for(
            lambda: (
                api.get("/jobs/default/slow-one").status_code == 200
                and api.get("/jobs/default/slow-one").json()["decisions"]
            ),
            timeout=20,
            what="the report decided",
        )


def test_unknown_ids_get_404(api_stack: ApiStack) -> None:
    with api_stack.client() as api:
        for response in (
            api.get("/jobs/nobody"),
            api.get("/jobs/ns/nobody"),
            api.delete("/finish/nobody"),
            api.delete("/finish/ns/nobody"),
        ):
            assert response.status_code == 404
            assert "unknown job" in response.json()["detail"]


# --- plan, queue, metrics, health ----------------------------------------------------------


def test_plan_is_the_planners_newest_round_never_a_recomputation(api_stack: ApiStack) -> None:
    """The API runs no policy: ``GET /plan`` is the stored record of the newest round."""
    plan_key = f"{api_stack.settings.redis_key_prefix}plan:latest"
    api_stack.redis.delete(plan_key)
    with api_stack.client() as api:
        none_yet = api.get("/plan")
    assert none_yet.status_code == 404 and none_yet.json()["detail"] == "no autoscale round yet"

    # A cluster the reader would show differently from the round's: the answer is the round's.
    reader = StaticClusterReader(api_stack.redis, prefix=api_stack.settings.redis_key_prefix)
    reader.store(
        StaticCluster(nodes=(StaticNode(name="n1", cpu_milli=8000, memory_mega=32000, gpu=4),))
    )
    reason = Reason(
        rule="edl.grow", message="idle GPU room for one more replica", numbers={"idle_gpu": 3}
    )
    record = PlanRecord(
        run_id=7,
        at=1234.5,
        owner="planner-a",
        plan=ScalingPlan(
            policy="edl",
            decisions=(
                ScalingDecision(job="ml/bert", current=1, target=2, reason=reason),
                ScalingDecision(job="ml/gpt", current=3, target=3, reason=reason),
            ),
        ),
        cluster=ClusterResource(node_count=2, gpu_total=16, gpu_limit=5),
    )
    api_stack.runtime.store.save_plan(record, free=None)
    try:
        with api_stack.client() as api:
            newest = api.get("/plan").json()
    finally:
        api_stack.redis.delete(plan_key)
        reader.store(StaticCluster())
    assert (newest["policy"], newest["run_id"], newest["at"]) == ("edl", 7, 1234.5)
    assert (newest["jobs_considered"], newest["changes"]) == (2, 1)
    assert newest["cluster"]["gpu_total"] == 16 and newest["cluster"]["node_count"] == 2
    bert = newest["decisions"][0]
    assert (bert["job"], bert["current"], bert["target"], bert["direction"]) == (
        "ml/bert",
        1,
        2,
        "up",
    )
    assert bert["rule"] == "edl.grow" and bert["message"] == reason.message


def test_queue_shows_depths_and_dead_letters(api_stack: ApiStack) -> None:
    api_stack.runtime.dead_letters.add(task="trainscaler.submit", payload=[1], error="bad", at=1.0)
    with api_stack.client() as api:
        view = api.get("/queue", params={"dead_letters": 5}).json()
    assert set(view["queues"]) == {"train", "wait"}
    assert set(view["queues"]["train"]) == {"depth", "in_flight", "oldest_age_s"}
    assert set(view["celery"]) == {"control", "events", "cluster-writes"}
    assert view["dead_letters"]["count"] >= 1
    assert view["dead_letters"]["newest"][0]["error"] == "bad"


def test_metrics_show_scrape_time_gauges_and_this_process_counters(api_stack: ApiStack) -> None:
    # A Kubernetes request this API process made (its views read the cluster): counted
    # in memory, and on this process's /metrics without any Redis write.
    api_stack.runtime.metrics.record_kube_request(verb="get", code=200)
    metrics_keys = f"{api_stack.settings.redis_key_prefix}metrics:*"
    with api_stack.client() as api:
        job = str(_train(api)["job"])
        wait_for(lambda: api.get(f"/jobs/{job}").json()["replicas"], timeout=20, what="admitted")
        text = api.get("/metrics").text
    assert 'trainscaler_kube_api_requests_total{code="200",verb="GET"} 1.0' in text
    assert not api_stack.redis.keys(metrics_keys)
    # Scale operations and decisions are the workers' (each scraped per pod), not the API's.
    assert "trainscaler_scale_operations_total{" not in text
    assert 'trainscaler_queue_depth{kind="scheduler",queue="train"}' in text
    assert 'trainscaler_queue_depth{kind="celery",queue="events"}' in text
    assert "trainscaler_queue_oldest_age_seconds" in text
    assert "trainscaler_dead_letters " in text
    assert "trainscaler_job_desired_replicas{job_key=" in text
    assert "trainscaler_api_requests_total" in text
    assert "trainscaler_state_up 1.0" in text
    assert f'trainscaler_job_replicas{{job_key="{job}"}}' in text


def test_health_is_ok_with_redis_and_the_cluster(api_stack: ApiStack) -> None:
    with api_stack.client() as api:
        response = api.get("/health")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"redis": "ok", "cluster": "ok"},
        "failing": [],
    }


def test_health_names_redis_when_it_is_down(api_stack: ApiStack) -> None:
    from workers.adapters.redis_server import free_port
    from workers.wiring import Runtime

    dead = api_stack.settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with (
        ServedApi(create_app(dead, runtime=Runtime(dead))) as served,
        httpx.Client(base_url=served.url, timeout=20) as api,
    ):
        response = api.get("/health")
        jobs = api.get("/jobs", headers={"Authorization": f"Bearer {TOKEN}"})
        train = api.post("/train", json=KUBEML_TRAIN, headers={"Authorization": f"Bearer {TOKEN}"})
        metrics = api.get("/metrics")
    assert response.status_code == 503
    assert "redis" in response.json()["failing"]
    assert response.json()["checks"]["redis"].startswith("unreachable")
    assert jobs.status_code == 503 and "redis unavailable" in jobs.json()["detail"]
    assert train.status_code == 503 and "unavailable" in train.json()["detail"]
    # Metrics still answer, saying the state could not be read.
    assert metrics.status_code == 200 and "trainscaler_state_up 0.0" in metrics.text


def test_health_names_the_cluster_when_kubernetes_is_down(api_stack: ApiStack, tmp_path) -> None:
    from workers.adapters.redis_server import free_port

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        f"clusters: [{{name: dead, cluster: {{server: 'http://127.0.0.1:{free_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: u}}]\n"
    )
    settings = api_stack.settings.model_copy(
        update={"scaler": "kubernetes", "kubeconfig": str(kubeconfig)}
    )
    with (
        ServedApi(create_app(settings, runtime=api_stack.runtime)) as served,
        httpx.Client(base_url=served.url, timeout=20) as api,
    ):
        response = api.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["cluster"] and body["checks"]["redis"] == "ok"
