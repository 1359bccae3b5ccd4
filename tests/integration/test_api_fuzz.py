"""1 000 hypothesis-generated requests per route: a 4xx (or a 2xx when valid), never a 5xx.

One real uvicorn server (auth off, so bodies reach validation; plus the
secured one for the 401 path) serves every example through real HTTP; the
server must still be up and healthy afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.api_fixtures import ApiStack, api_stack

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
        ("GET", "/plan?policy={}"),
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
