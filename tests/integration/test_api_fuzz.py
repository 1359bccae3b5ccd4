"""1 000 hypothesis-generated requests per route: a 4xx (or a 2xx when valid), never a 5xx.

One real uvicorn server (auth off, so bodies reach validation; plus the
secured one for the 401 path) serves every example through real HTTP; the
server must still be up and healthy afterwards.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.api_fixtures import ApiStack, ServedApi, api_stack
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.api.app import create_app

pytestmark = pytest.mark.timeout(600)
__all__ = ["api_stack"]

EXAMPLES = 1000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)
odd_numbers = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", "1" * 400])
raw_bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    # Lone surrogates, bare non-finite numbers and deep nesting: valid-looking JSON text.
    st.just(b'{"model_type": "\\ud800", "batch_size": 1, "epochs": 1, "dataset": "x"}'),
    odd_numbers.map(lambda n: f'{{"batch_size": {n}}}'.encode()),
    st.integers(min_value=1, max_value=20000).map(lambda n: b"[" * n + b"]" * n),
)

texts = st.text(max_size=20) | st.sampled_from(["", "a/b", "ns/x/y", "\ud800", "..", "%2F"])
numbers = st.integers(-3, 10**9) | st.floats(allow_nan=False) | texts | st.none()

train_requests = st.fixed_dictionaries(
    {
        "model_type": texts,
        "batch_size": numbers,
        "epochs": numbers,
        "dataset": texts,
    },
    optional={
        "learning_rate": numbers,
        "function_name": texts,
        "namespace": texts,
        "min_replicas": numbers,
        "max_replicas": numbers,
        "ps_url": texts | st.none(),
        "options": st.fixed_dictionaries(
            {},
            optional={
                "default_parallelism": numbers,
                "static_parallelism": st.booleans() | texts,
                "k": numbers,
                "goal_accuracy": numbers,
            },
        ),
        "unexpected": json_values,
    },
)
train_tasks = st.fixed_dictionaries(
    {"job_id": texts, "parameters": train_requests | json_values},
    optional={
        "state": st.fixed_dictionaries(
            {}, optional={"parallelism": numbers, "elapsed_time": numbers}
        )
        | json_values
    },
)


@pytest.fixture(scope="module")
def api(api_stack: ApiStack) -> Iterator[httpx.Client]:
    with api_stack.client(auth=False) as client:
        yield client


def _check(response: httpx.Response, *, valid_allowed: bool) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if not valid_allowed:
        assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    assert response.headers.get("x-request-id")


def _post(api: httpx.Client, path: str, body: bytes, content_type: str | None) -> httpx.Response:
    headers = {"content-type": content_type} if content_type else {}
    return api.post(path, content=body, headers=headers, params={"wait": 0})


content_types = st.sampled_from(
    ["application/json", "text/plain", None, "application/x-www-form-urlencoded"]
)


@pytest.mark.parametrize("path", ["/train", "/job"])
def test_junk_bodies_get_4xx(api: httpx.Client, path: str) -> None:
    @FUZZ
    @given(body=raw_bodies, content_type=content_types)
    def run(body: bytes, content_type: str | None) -> None:
        _check(_post(api, path, body, content_type), valid_allowed=False)

    run()


def test_train_shaped_bodies_never_5xx(api: httpx.Client) -> None:
    @FUZZ
    @given(body=train_requests)
    def run(body: dict[str, Any]) -> None:
        _check(
            _post(api, "/train", json.dumps(body).encode(), "application/json"), valid_allowed=True
        )

    run()


def test_job_shaped_bodies_never_5xx(api: httpx.Client) -> None:
    @FUZZ
    @given(body=train_tasks)
    def run(body: dict[str, Any]) -> None:
        _check(
            _post(api, "/job", json.dumps(body).encode(), "application/json"), valid_allowed=True
        )

    run()


@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("DELETE", "/finish/{}"),
        ("GET", "/jobs/{}"),
        ("GET", "/plan?{}"),
        ("GET", "/queue?dead_letters={}"),
        ("GET", "/jobs?{}"),
        ("GET", "/health?{}"),
        ("GET", "/metrics?{}"),
    ],
)
def test_other_routes_with_junk_paths_queries_and_bodies(
    api: httpx.Client, method: str, template: str
) -> None:
    @FUZZ
    @given(part=texts, body=raw_bodies)
    def run(part: str, body: bytes) -> None:
        path = template.replace("{}", quote(part.encode("utf-8", "surrogatepass"), safe="/"))
        response = api.request(method, path, content=body)
        _check(response, valid_allowed=True)

    run()


def test_the_secured_server_answers_401_to_junk(api_stack: ApiStack) -> None:
    with api_stack.client(token=None) as anonymous:

        @FUZZ
        @given(body=raw_bodies, path=st.sampled_from(["/train", "/job", "/finish/x", "/jobs"]))
        def run(body: bytes, path: str) -> None:
            method = (
                "DELETE" if path.startswith("/finish") else ("GET" if path == "/jobs" else "POST")
            )
            response = anonymous.request(method, path, content=body)
            assert response.status_code == 401, response.text[:300]

        run()


def test_the_server_is_still_up_and_healthy(api_stack: ApiStack, api: httpx.Client) -> None:
    assert api_stack.open.alive() and api_stack.secured.alive()
    assert api.get("/health").status_code == 200


# --- hostile identities: rejected with the field named, never recorded -------------------

# The oracle, written here independently of scheduler_core: RFC 1123 as Kubernetes states it.
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _is_label(text: str) -> bool:
    return len(text) <= 63 and LABEL.fullmatch(text) is not None


def _is_subdomain(text: str) -> bool:
    return len(text) <= 253 and all(_is_label(part) for part in text.split("."))


HOSTILE_IDS = [
    "../../etc/passwd",
    "default/../kube-system/x",
    "default/\x00",
    "default/a\nb\r\n",
    "/etc/passwd",
    "default/",
    "a/b/c",
    "..",
    "Default/x",
    "default/a b",
    "default/-x",
    "default/x-",
    "default/x..y",
    "default/" + "x" * 254,
    "x" * 1_000_000,  # a 1 MB id (under the 1 MiB body limit, so the model refuses it)
]


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _unrecorded(stack: ApiStack, ident: str) -> bool:
    keys = [
        _text(key) for key in stack.redis.scan_iter(match=f"{DEFAULT_KEY_PREFIX}job:*", count=1000)
    ]
    jobs = {_text(member) for member in stack.redis.smembers(f"{DEFAULT_KEY_PREFIX}jobs")}
    own = f"{DEFAULT_KEY_PREFIX}job:{ident}"
    return ident not in jobs and not [k for k in keys if k == own or k.startswith(own + ":")]


@pytest.mark.parametrize("ident", HOSTILE_IDS, ids=lambda i: repr(i[:30]))
def test_hostile_job_ids_are_rejected_naming_the_field(
    api_stack: ApiStack, api: httpx.Client, ident: str
) -> None:
    task = {
        "job_id": ident,
        "parameters": {"model_type": "m", "batch_size": 1, "epochs": 1, "dataset": "d"},
    }
    response = _post(api, "/job", json.dumps(task).encode(), "application/json")
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert "body.job_id" in response.json()["fields"]
    assert ident not in response.text  # the input is not echoed back
    # Paths are bounded by the HTTP client (64 kB URLs); the body carries the 1 MB id.
    path = quote(ident[:4096].encode(), safe="/")
    for method, route, field in (
        ("GET", "/jobs/", "path.job_id"),
        ("DELETE", "/finish/", "path.task_id"),
    ):
        answer = api.request(method, route + path)
        # A '/' the router splits on may leave no route at all (404); never a 2xx or 5xx.
        assert answer.status_code in (404, 422), (method, answer.status_code, answer.text[:300])
        if answer.status_code == 422 and "fields" in answer.json():
            assert field in answer.json()["fields"]
    assert _unrecorded(api_stack, ident)


@pytest.mark.parametrize(
    "namespace", ["kube-system/x", "../etc", "a\nb", "UPPER", "-a", "x" * 64, ""]
)
def test_hostile_namespaces_are_rejected_naming_the_field(
    api_stack: ApiStack, api: httpx.Client, namespace: str
) -> None:
    request = {
        "model_type": "m",
        "batch_size": 1,
        "epochs": 1,
        "dataset": "d",
        "namespace": namespace,
    }
    response = _post(api, "/train", json.dumps(request).encode(), "application/json")
    assert response.status_code == 422 and "body.namespace" in response.json()["fields"]
    task = {"job_id": "j1", "parameters": request}
    response = _post(api, "/job", json.dumps(task).encode(), "application/json")
    assert response.status_code == 422 and "body.parameters.namespace" in response.json()["fields"]


def test_fuzzed_job_ids_are_accepted_only_when_they_are_kubernetes_identities(
    api: httpx.Client,
) -> None:
    ids = texts | st.text(st.sampled_from("ab-./\\\x00\n%Z9 "), max_size=20)

    @FUZZ
    @given(ident=ids)
    def run(ident: str) -> None:
        task = {
            "job_id": ident,
            "parameters": {"model_type": "m", "batch_size": 1, "epochs": 1, "dataset": "d"},
        }
        response = _post(api, "/job", json.dumps(task).encode(), "application/json")
        namespace, slash, name = ident.partition("/")
        valid = (_is_label(namespace) and _is_subdomain(name)) if slash else _is_subdomain(ident)
        if valid:
            assert response.status_code in (200, 202), (ident, response.text[:300])
        else:
            assert response.status_code == 422, (ident, response.status_code, response.text[:300])
            assert "body.job_id" in response.json()["fields"]

    run()


def test_a_scoped_server_refuses_other_namespaces(api_stack: ApiStack) -> None:
    settings = api_stack.settings.model_copy(
        update={"namespaces": ("default",), "api_auth_disabled": True, "api_token": None}
    )
    scoped = ServedApi(create_app(settings, runtime=api_stack.runtime)).start()
    try:
        with httpx.Client(base_url=scoped.url, timeout=15.0) as client:
            task = {
                "job_id": "kube-system/coredns",
                "parameters": {"model_type": "m", "batch_size": 1, "epochs": 1, "dataset": "d"},
            }
            response = _post(client, "/job", json.dumps(task).encode(), "application/json")
            assert response.status_code == 403 and "body.job_id" in response.json()["detail"]
            request = {
                "model_type": "m",
                "batch_size": 1,
                "epochs": 1,
                "dataset": "d",
                "namespace": "kube-system",
            }
            response = _post(client, "/train", json.dumps(request).encode(), "application/json")
            assert response.status_code == 403 and "body.namespace" in response.json()["detail"]
            assert _unrecorded(api_stack, "kube-system/coredns")
            # Inside the scope, the same shapes go through.
            task["job_id"] = "default/coredns"
            assert _post(
                client, "/job", json.dumps(task).encode(), "application/json"
            ).status_code in (200, 202)
    finally:
        scoped.stop()
