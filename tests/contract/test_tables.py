"""Table contract: ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``, what
``kubectl get`` asks for, answered with kube-apiserver's columns."""

from __future__ import annotations

import json
import urllib.parse

from .conftest import deployment_manifest, pod_manifest
from .schema_fixtures import (
    GROUP,
    TABLE_ACCEPT,
    create_gadget,
    gadget_crd,
    plain_crd,
    raw_request,
)

__all__ = ["gadget_crd", "plain_crd"]


def _table(cluster, path, **query):
    response = raw_request(cluster.api, "GET", path, accept=TABLE_ACCEPT, query=list(query.items()))
    assert response.status == 200, response.body
    assert response.body["kind"] == "Table"
    assert response.body["apiVersion"] == "meta.k8s.io/v1"
    return response.body


def _columns(table, *, wide=False):
    return [c["name"] for c in table["columnDefinitions"] if wide or c["priority"] == 0]


def _row_for(table, name):
    rows = [r for r in table["rows"] if r["object"]["metadata"]["name"] == name]
    assert len(rows) == 1, table["rows"]
    return rows[0]


def test_pods_table(cluster, core, namespace):
    core.create_namespaced_pod(namespace, pod_manifest("tp"))
    table = _table(cluster, f"/api/v1/namespaces/{namespace}/pods")
    assert _columns(table) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert _columns(table, wide=True)[5:] == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    row = _row_for(table, "tp")
    assert row["cells"][0] == "tp"
    assert row["cells"][1] in ("0/1", "1/1")
    assert len(row["cells"]) == len(table["columnDefinitions"])
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert table["metadata"]["resourceVersion"]


def test_nodes_table(cluster):
    table = _table(cluster, "/api/v1/nodes")
    assert _columns(table) == ["Name", "Status", "Roles", "Age", "Version"]
    assert _columns(table, wide=True)[5:] == [
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ]
    assert table["rows"] and all(
        r["cells"][1].startswith(("Ready", "NotReady")) for r in table["rows"]
    )


def test_deployments_table_counts_replicas(cluster, apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("td", replicas=2))
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"

    def ready_row():
        row = _row_for(_table(cluster, path), "td")
        return row if row["cells"][1] == "2/2" else None

    row = cluster.wait_for(ready_row, what="the deployment's 2/2 row")
    table = _table(cluster, path)
    assert _columns(table) == ["Name", "Ready", "Up-to-date", "Available", "Age"]
    assert _columns(table, wide=True)[5:] == ["Containers", "Images", "Selector"]
    assert row["cells"][2:4] == [2, 2]
    assert row["cells"][5:] == ["main", "registry.k8s.io/pause:3.9", "app=td"]


def test_events_table(cluster, core, namespace):
    event = {
        "metadata": {"name": "te.1"},
        "involvedObject": {"kind": "Pod", "name": "tp", "namespace": namespace},
        "reason": "Tested",
        "message": "a message ",
        "type": "Normal",
        "source": {"component": "contract"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 3,
    }
    core.create_namespaced_event(namespace, event)
    table = _table(cluster, f"/api/v1/namespaces/{namespace}/events")
    assert _columns(table) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert _columns(table, wide=True) == [
        "Last Seen",
        "Type",
        "Reason",
        "Object",
        "Subobject",
        "Source",
        "Message",
        "First Seen",
        "Count",
        "Name",
    ]
    cells = _row_for(table, "te.1")["cells"]
    assert cells[1:5] == ["Normal", "Tested", "pod/tp", ""]
    assert cells[5] == "contract" and cells[6] == "a message" and cells[8] == 3


def test_custom_resource_printer_columns(cluster, namespace, gadget_crd):
    spec = {"size": 2, "maxSize": 4, "colour": "red"}
    assert create_gadget(cluster, namespace, gadget_crd, "g1", spec).status == 201
    path = f"/apis/{GROUP}/v1/namespaces/{namespace}/{gadget_crd.plural}"
    table = _table(cluster, path)
    assert _columns(table) == ["Name", "Size", "Colour", "Age"]
    assert _columns(table, wide=True) == ["Name", "Size", "Colour", "Mode", "Age"]
    cells = _row_for(table, "g1")["cells"]
    assert cells[:4] == ["g1", 2, "red", "auto"]
    assert cells[4].endswith("s") or cells[4].endswith("m")  # a human age, e.g. "0s"
    one = _table(cluster, f"{path}/g1")
    assert [r["cells"][0] for r in one["rows"]] == ["g1"]


def test_custom_resource_without_columns_prints_name_and_age(cluster, namespace, plain_crd):
    assert create_gadget(cluster, namespace, plain_crd, "p1", {"anything": 1}).status == 201
    table = _table(cluster, f"/apis/{GROUP}/v1/namespaces/{namespace}/{plain_crd.plural}")
    assert _columns(table, wide=True) == ["Name", "Age"]
    assert _row_for(table, "p1")["cells"][0] == "p1"


def test_include_object_none_and_object(cluster, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "io"}, "data": {"a": "b"}})
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    full = _table(cluster, path, includeObject="Object")
    assert _row_for(full, "io")["object"]["data"] == {"a": "b"}
    bare = _table(cluster, path, includeObject="None")
    assert all("object" not in row or row["object"] is None for row in bare["rows"])


def test_plain_json_is_still_served_without_table_accept(cluster, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "pj"}})
    response = raw_request(cluster.api, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
    assert response.body["kind"] == "ConfigMapList"


def test_watch_streams_one_row_tables(cluster, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "w1"}})
    query = urllib.parse.urlencode({"watch": "true", "timeoutSeconds": "1"})
    api = cluster.api
    method, url, headers, body, _ = api.param_serialize(
        "GET",
        f"/api/v1/namespaces/{namespace}/configmaps?{query}",
        header_params={"Accept": TABLE_ACCEPT},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, headers, body)
    events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    added = [e for e in events if e["type"] == "ADDED"]
    assert added, events
    tables = [event["object"] for event in added]
    assert all(table["kind"] == "Table" and len(table["rows"]) == 1 for table in tables)
    # A real namespace also holds kube-root-ca.crt, published by a controller.
    assert "w1" in [table["rows"][0]["cells"][0] for table in tables]


def test_other_built_in_columns(cluster, namespace):
    expected = {
        "/apis/apps/v1/namespaces/{ns}/statefulsets": (
            ["Name", "Ready", "Age"],
            ["Containers", "Images"],
        ),
        "/apis/apps/v1/namespaces/{ns}/replicasets": (
            ["Name", "Desired", "Current", "Ready", "Age"],
            ["Containers", "Images", "Selector"],
        ),
        "/apis/batch/v1/namespaces/{ns}/jobs": (
            ["Name", "Status", "Completions", "Duration", "Age"],
            ["Containers", "Images", "Selector"],
        ),
        "/api/v1/namespaces/{ns}/services": (
            ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"],
            ["Selector"],
        ),
        "/api/v1/namespaces/{ns}/configmaps": (["Name", "Data", "Age"], []),
        "/api/v1/namespaces/{ns}/secrets": (["Name", "Type", "Data", "Age"], []),
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases": (["Name", "Holder", "Age"], []),
        "/apis/autoscaling/v1/namespaces/{ns}/horizontalpodautoscalers": (
            ["Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"],
            [],
        ),
        "/api/v1/namespaces": (["Name", "Status", "Age"], []),
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions": (
            ["Name", "Scope", "Versions", "Created At"],
            ["Group", "Kind", "ShortNames", "Established"],
        ),
    }
    for path, (columns, wide) in expected.items():
        table = _table(cluster, path.format(ns=namespace))
        assert _columns(table) == columns, path
        assert _columns(table, wide=True) == columns + wide, path  # wide columns come last
