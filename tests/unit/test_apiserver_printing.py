"""The loopback apiserver's table helpers against kube's own documented outputs:
``duration.HumanDuration`` (apimachinery's duration_test cases) and the simple
JSONPath of CRD printer columns; structural pruning of embedded resources."""

from __future__ import annotations

import pytest

from trainscaler_sim.apiserver.schema_validation import prune, unknown_fields
from trainscaler_sim.apiserver.tables import jsonpath
from trainscaler_sim.apiserver.timefmt import human_duration

MINUTE, HOUR, DAY = 60, 3600, 86400


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-2, "<invalid>"),
        (-1, "0s"),
        (1, "1s"),
        (70, "70s"),
        (119, "119s"),
        (2 * MINUTE, "2m"),
        (2 * MINUTE + 30, "2m30s"),
        (9 * MINUTE + 59, "9m59s"),
        (10 * MINUTE, "10m"),
        (3 * HOUR - 1, "179m"),
        (3 * HOUR, "3h"),
        (7 * HOUR + 59 * MINUTE, "7h59m"),
        (8 * HOUR, "8h"),
        (47 * HOUR + 59 * MINUTE, "47h"),
        (48 * HOUR, "2d"),
        (2 * DAY + 5 * HOUR, "2d5h"),
        (8 * DAY, "8d"),
        (367 * DAY, "367d"),
        (2 * 365 * DAY, "2y"),
        (2 * 365 * DAY + 30 * DAY, "2y30d"),
        (8 * 365 * DAY, "8y"),
    ],
)
def test_human_duration_matches_kube(seconds, shown):
    assert human_duration(seconds) == shown


def test_jsonpath_fields_indexes_and_filters():
    obj = {
        "spec": {"replicas": 3},
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X"}]},
        "items": [{"n": 1}, {"n": 2}],
    }
    assert jsonpath(obj, ".spec.replicas") == [3]
    assert jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath(obj, ".items[*].n") == [1, 2]
    assert jsonpath(obj, ".items[-1].n") == [2]
    assert jsonpath(obj, ".spec.missing") == []


def test_pruning_keeps_embedded_resource_metadata_and_preserved_subtrees():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {"spec": {"type": "object", "properties": {}}},
                    },
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        },
    }
    obj = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "a", "anything": 1},
        "spec": {
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"x": 1}, "spec": {"y": 2}},
            "free": {"any": {"thing": True}},
            "labels": {"a": "b"},
            "typo": 1,
        },
        "top": 1,
    }
    assert unknown_fields(obj, schema) == ["spec.template.spec.y", "spec.typo", "top"]
    prune(obj, schema)
    assert obj["spec"] == {
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"x": 1}, "spec": {}},
        "free": {"any": {"thing": True}},
        "labels": {"a": "b"},
    }
    assert obj["metadata"] == {"name": "a", "anything": 1} and "top" not in obj
