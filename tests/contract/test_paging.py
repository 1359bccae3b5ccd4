"""limit/continue paging covers every object exactly once; an expired continue
token answers 410."""

from __future__ import annotations

import pytest
from kubernetes import client

from .conftest import ROOT_CA


def _fill(core, namespace, *, count):
    for index in range(count):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"cm-{index:03d}", "labels": {"odd": str(index % 2)}}}
        )


def _pages(core, namespace, *, limit, **kwargs):
    names, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map(namespace, limit=limit, _continue=token, **kwargs)
        names += [item.metadata.name for item in page.items if item.metadata.name != ROOT_CA]
        pages += 1
        token = page.metadata._continue
        if not token:
            return names, pages
        assert page.metadata.remaining_item_count is None or page.metadata.remaining_item_count > 0


def test_paging_covers_every_object_exactly_once(core, namespace):
    _fill(core, namespace, count=23)
    names, pages = _pages(core, namespace, limit=5)
    assert sorted(names) == [f"cm-{index:03d}" for index in range(23)]
    assert len(names) == len(set(names)) == 23
    assert pages == 5


def test_paging_with_a_selector(core, namespace):
    _fill(core, namespace, count=11)
    names, _ = _pages(core, namespace, limit=2, label_selector="odd=1")
    assert sorted(names) == [f"cm-{index:03d}" for index in range(1, 11, 2)]


def test_expired_continue_token_is_gone(loopback, core, namespace):
    _fill(core, namespace, count=4)
    first = core.list_namespaced_config_map(namespace, limit=2)
    assert first.metadata._continue
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "later"}})
    loopback.compact()
    with pytest.raises(client.ApiException) as caught:
        core.list_namespaced_config_map(namespace, limit=2, _continue=first.metadata._continue)
    assert caught.value.status == 410


def test_list_exact_resource_version_shows_the_past(cluster, core, namespace):
    _fill(core, namespace, count=2)
    version = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.delete_namespaced_config_map("cm-000", namespace)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm-new"}})
    past = core.list_namespaced_config_map(
        namespace, resource_version=version, resource_version_match="Exact"
    )
    assert sorted(item.metadata.name for item in past.items) == ["cm-000", "cm-001", ROOT_CA]
