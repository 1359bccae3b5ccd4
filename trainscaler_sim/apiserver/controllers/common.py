"""Helpers shared by the workload controllers: ownership, pod templates, pod state."""

from __future__ import annotations

import copy
import json
from typing import Any

from ..json_types import JsonObject

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def controller_reference(owner: JsonObject) -> JsonObject:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: JsonObject) -> JsonObject | None:
    for reference in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if reference.get("controller"):
            return dict(reference)
    return None


def template_hash(template: Any) -> str:
    """pod-template-hash: FNV-1a of the template, encoded like rand.SafeEncodeString."""
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[ord(char) % len(_SAFE_ALPHABET)] for char in str(value))


def pod_from_template(
    owner: JsonObject,
    template: JsonObject,
    *,
    name: str | None = None,
    generate_name: str | None = None,
    extra_labels: dict[str, str] | None = None,
) -> JsonObject:
    template_meta = template.get("metadata") or {}
    labels = dict(template_meta.get("labels") or {})
    labels.update(extra_labels or {})
    meta: JsonObject = {"labels": labels, "ownerReferences": [controller_reference(owner)]}
    if template_meta.get("annotations"):
        meta["annotations"] = dict(template_meta["annotations"])
    if name is not None:
        meta["name"] = name
    if generate_name is not None:
        meta["generateName"] = generate_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def is_active(pod: JsonObject) -> bool:
    return bool((pod.get("status") or {}).get("phase") not in TERMINATED_PHASES)


def is_ready(pod: JsonObject) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def set_condition(conditions: list[JsonObject], new: JsonObject, *, now: str) -> list[JsonObject]:
    """Upsert a condition by type; an unchanged condition keeps its timestamps so
    that re-reconciling writes nothing (and so triggers no further events)."""
    result: list[JsonObject] = []
    replaced = False
    for condition in conditions:
        if condition.get("type") != new.get("type"):
            result.append(condition)
            continue
        replaced = True
        fields = ("status", "reason", "message")
        if all(condition.get(key) == new.get(key) for key in fields):
            result.append(condition)
            continue
        changed = condition.get("status") != new.get("status")
        merged = dict(new)
        merged["lastTransitionTime"] = now if changed else condition.get("lastTransitionTime", now)
        if "lastUpdateTime" in new:
            merged["lastUpdateTime"] = now
        result.append(merged)
    if not replaced:
        added = dict(new)
        added["lastTransitionTime"] = now
        if "lastUpdateTime" in new:
            added["lastUpdateTime"] = now
        result.append(added)
    return result
