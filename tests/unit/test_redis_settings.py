"""Redis settings of issue 16: the key prefix's hash tag, retention and Sentinel wiring."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX, hash_tag
from workers.adapters.redis_sentinel import (
    PLAIN_TRANSPORT,
    SENTINEL_TRANSPORT,
    celery_redis,
)
from workers.celery_app import create_app
from workers.settings import Settings


def _settings(**values: object) -> Settings:
    return Settings(discover=False, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "tag"),
    [
        ("{trainscaler}:", "trainscaler"),
        ("a{b}c{d}", "b"),
        ("{}x", None),
        ("x{", None),
        ("x", None),
    ],
)
def test_hash_tag_follows_the_cluster_spec(key: str, tag: str | None) -> None:
    assert hash_tag(key) == tag


def test_the_key_prefix_must_carry_a_hash_tag() -> None:
    assert hash_tag(_settings().redis_key_prefix) == "trainscaler"
    assert _settings(redis_key_prefix="{team-a}:ts:").redis_key_prefix == "{team-a}:ts:"
    with pytest.raises(ValidationError, match="hash tag"):
        _settings(redis_key_prefix="trainscaler:")
    assert DEFAULT_KEY_PREFIX == "{trainscaler}:"


def test_retention_defaults_to_a_day() -> None:
    assert _settings().job_retention == 86_400.0


def test_sentinels_parse_and_refuse_what_is_no_host_port() -> None:
    assert _settings(redis_sentinels="a:1, b:2").redis_sentinels == ("a:1", "b:2")
    assert _settings(redis_sentinels='["a:1"]').redis_sentinels == ("a:1",)
    with pytest.raises(ValidationError, match="host:port"):
        _settings(redis_sentinels="a:1,b")


def test_without_sentinels_celery_uses_the_plain_url() -> None:
    settings = _settings(redis_url="redis://:pw@h:1/2")
    plain = celery_redis(settings)
    assert (plain.broker_url, plain.backend_url, plain.redbeat_url) == (settings.redis_url,) * 3
    assert plain.transport == PLAIN_TRANSPORT
    assert plain.redbeat_options == {}


def test_with_sentinels_broker_backend_and_redbeat_ask_them() -> None:
    settings = _settings(
        redis_url="redis://:p%40ss@ignored:1/3",
        redis_sentinels="s1:26379,s2:26380",
        redis_sentinel_master="primary",
        redis_sentinel_password="sentinel-secret",
    )
    located = celery_redis(settings)
    assert located.broker_url == "sentinel://:p%40ss@s1:26379/3;sentinel://:p%40ss@s2:26380/3"
    assert located.backend_url == located.broker_url
    assert located.transport == SENTINEL_TRANSPORT
    assert located.transport_options["master_name"] == "primary"
    assert located.transport_options["sentinel_kwargs"]["password"] == "sentinel-secret"
    assert located.redbeat_url.startswith("redis-sentinel")
    assert located.redbeat_options["sentinels"] == [("s1", 26379), ("s2", 26380)]
    assert located.redbeat_options["service_name"] == "primary"
    assert located.redbeat_options["password"] == "p@ss"
    assert located.redbeat_options["db"] == 3

    app = create_app(settings)
    assert app.conf.broker_transport == SENTINEL_TRANSPORT
    assert app.conf.broker_transport_options["master_name"] == "primary"
    assert app.conf.broker_transport_options["visibility_timeout"] == (
        settings.broker_visibility_timeout
    )
    assert app.conf.result_backend_transport_options["master_name"] == "primary"
    assert type(app.backend).__name__ == "SentinelBackend"
    assert app.conf.redbeat_redis_options["service_name"] == "primary"
