"""The three PATCH flavours the apiserver accepts, selected by Content-Type.

* ``application/merge-patch+json``: RFC 7386 JSON merge patch.
* ``application/strategic-merge-patch+json``: merge patch plus list merging by
  the merge keys the built-in kinds declare (containers by ``name``, conditions
  by ``type``, ...), and the ``$patch`` / ``$deleteFromPrimitiveList`` directives.
* ``application/json-patch+json``: RFC 6902 operations, including ``test``.

Every function mutates and returns ``target``; callers pass a private copy.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# patchMergeKey of the list fields in the built-in types this server serves.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "addresses": "type",
    "taints": "key",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
# Lists of scalars with patchStrategy=merge: a patch adds to them as a set.
_PRIMITIVE_MERGE = frozenset({"finalizers"})


class JsonPatchFailed(ApiError):
    """A well-formed JSON patch that cannot apply (missing path, failed test): 422."""

    def __init__(self, message: str) -> None:
        super().__init__(422, message)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _merge_key(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        # Container ports merge by containerPort, Service ports by port.
        has_container_port = any(
            isinstance(item, dict) and "containerPort" in item for item in items
        )
        return "containerPort" if has_container_port else "port"
    return _MERGE_KEYS.get(field)


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _strip_directives(item) for key, item in value.items() if not key.startswith("$")
        }
    if isinstance(value, list):
        return [_strip_directives(item) for item in value]
    return value


def _merge_list(field: str, original: list[Any], *, patch: list[Any]) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            _strip_directives(item)
            for item in patch
            if not (isinstance(item, dict) and item.get("$patch") == "replace")
        ]
    if field in _PRIMITIVE_MERGE:
        merged = list(original)
        merged.extend(item for item in patch if item not in merged)
        return merged
    key = _merge_key(field, original + patch)
    if key is None or not all(isinstance(item, dict) for item in patch):
        return [_strip_directives(item) for item in patch]
    result = list(original)
    for item in patch:
        position = next(
            (
                index
                for index, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
        elif position is None:
            result.append(_strip_directives(item))
        else:
            result[position] = _merge_map(result[position], item)
    return result


def _merge_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    if patch.get("$patch") == "replace":
        return _strip_directives(patch)  # type: ignore[no-any-return]
    result = original
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            existing = result.get(field)
            if isinstance(existing, list) and isinstance(value, list):
                result[field] = [item for item in existing if item not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
                continue
            existing = result.get(key)
            result[key] = _merge_map(existing if isinstance(existing, dict) else {}, value)
        elif isinstance(value, list):
            existing = result.get(key)
            result[key] = _merge_list(
                key, existing if isinstance(existing, list) else [], patch=value
            )
        else:
            result[key] = value
    return result


def strategic_merge_patch(target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Strategic merge patch over the built-in kinds' merge keys."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch body must be a JSON object")
    return _merge_map(target, patch)


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise bad_request(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isdigit():
        raise JsonPatchFailed(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise JsonPatchFailed(f"array index {index} out of bounds")
    return index


def _parent(document: Any, tokens: list[str]) -> Any:
    current = document
    for token in tokens[:-1]:
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, allow_end=False)]
        else:
            raise JsonPatchFailed(f"path component {token!r} not found")
    return current


def _get(document: Any, tokens: list[str]) -> Any:
    if not tokens:
        return document
    parent = _parent(document, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchFailed(f"path {'/'.join(tokens)!r} not found")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise JsonPatchFailed(f"path {'/'.join(tokens)!r} not found")


def _add(document: Any, tokens: list[str], *, value: Any) -> Any:
    if not tokens:
        return value
    parent = _parent(document, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise JsonPatchFailed(f"cannot add at {'/'.join(tokens)!r}")
    return document


def _remove(document: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise JsonPatchFailed("cannot remove the whole document")
    parent = _parent(document, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchFailed(f"path {'/'.join(tokens)!r} not found")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, allow_end=False)]
    else:
        raise JsonPatchFailed(f"path {'/'.join(tokens)!r} not found")
    return document


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902; a malformed patch is a 400, one that cannot apply is a 422."""
    if not isinstance(operations, list):
        raise bad_request("json patch body must be a JSON array of operations")
    document = target
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"invalid json patch operation {operation!r}")
        op = operation["op"]
        tokens = _pointer(operation["path"])
        if op in ("add", "replace", "test") and "value" not in operation:
            raise bad_request(f"json patch {op} operation needs a value")
        if op == "add":
            document = _add(document, tokens, value=copy.deepcopy(operation["value"]))
        elif op == "remove":
            document = _remove(document, tokens)
        elif op == "replace":
            _get(document, tokens)
            if tokens:
                document = _remove(document, tokens)
            document = _add(document, tokens, value=copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from"))
            value = copy.deepcopy(_get(document, source))
            if op == "move":
                document = _remove(document, source)
            document = _add(document, tokens, value=value)
        elif op == "test":
            if _get(document, tokens) != operation["value"]:
                raise JsonPatchFailed(
                    f"testing value {operation['path']} failed: value does not match"
                )
        else:
            raise bad_request(f"unknown json patch operation {op!r}")
    return document
