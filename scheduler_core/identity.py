"""Job identities: what a namespace, a name and a job key may be, and their bounds.

Kubernetes rules (RFC 1123, as the API server applies them): a namespace is a
DNS label (lower-case letters, digits and '-', starting and ending with a
letter or digit, at most 63 characters); an object name is a DNS subdomain
(such labels joined by '.', at most 253). A job key is exactly
``namespace/name``. Every model that carries an identity uses these types,
so every entry point that builds a model (HTTP API, Celery tasks, the KubeML
API, the scaler) rejects the same things with the field's name: traversal
(``../../etc/passwd``), control characters, a second '/', and size (a 1 MB
id). Free-text fields are bounded by ``TEXT_MAX`` / ``URL_MAX``.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

NAMESPACE_MAX = 63
NAME_MAX = 253
JOB_KEY_MAX = NAMESPACE_MAX + 1 + NAME_MAX
TEXT_MAX = 253
URL_MAX = 2048

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")

NAMESPACE_RULE = "a DNS-1123 label (a-z, 0-9, '-'; starts and ends alphanumeric; at most 63)"
NAME_RULE = "a DNS-1123 subdomain (labels joined by '.'; at most 253)"


def is_namespace(text: str) -> bool:
    return len(text) <= NAMESPACE_MAX and _LABEL_RE.fullmatch(text) is not None


def is_name(text: str) -> bool:
    return len(text) <= NAME_MAX and _SUBDOMAIN_RE.fullmatch(text) is not None


def split_job_key(key: str) -> tuple[str, str]:
    """``namespace/name`` -> (namespace, name); ``ValueError`` naming the bad part."""
    if len(key) > JOB_KEY_MAX:
        raise ValueError(f"job key longer than {JOB_KEY_MAX} characters")
    namespace, slash, name = key.partition("/")
    if not slash:
        raise ValueError("job key must be 'namespace/name'")
    if not is_namespace(namespace):
        raise ValueError(f"job key's namespace must be {NAMESPACE_RULE}")
    if not is_name(name):
        raise ValueError(f"job key's name must be {NAME_RULE}")
    return namespace, name


def check_job_ref(text: str) -> str:
    """A job named by its key ``namespace/name`` or by its bare name; ``ValueError`` if neither."""
    if "/" in text:
        split_job_key(text)
    elif not is_name(text):
        raise ValueError(f"must be a job key 'namespace/name' or a name, {NAME_RULE}")
    return text


def _valid_job_key(key: str) -> str:
    split_job_key(key)
    return key


def _valid_namespace(text: str) -> str:
    if not is_namespace(text):
        raise ValueError(f"namespace must be {NAMESPACE_RULE}")
    return text


def _valid_name(text: str) -> str:
    if not is_name(text):
        raise ValueError(f"name must be {NAME_RULE}")
    return text


# max_length first: a 1 MB value is refused before any pattern runs over it.
Namespace = Annotated[
    str, Field(min_length=1, max_length=NAMESPACE_MAX), AfterValidator(_valid_namespace)
]
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX), AfterValidator(_valid_name)]
JobKey = Annotated[str, Field(min_length=3, max_length=JOB_KEY_MAX), AfterValidator(_valid_job_key)]
# KubeML's job ids are bare names; trainscaler also takes the full key.
JobRef = Annotated[str, Field(min_length=1, max_length=JOB_KEY_MAX), AfterValidator(check_job_ref)]
Text = Annotated[str, Field(max_length=TEXT_MAX)]
Url = Annotated[str, Field(max_length=URL_MAX)]
