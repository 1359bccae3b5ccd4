"""Secure by default: the embedded run generates every secret and keeps them private."""

from __future__ import annotations

import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from workers.adapters.redis_server import redis_url, write_password_config
from workers.commands.run_plan import ClusterMode, Plan, plan_run, write_client_env
from workers.settings import Settings


def _embedded_plan(tmp_path: Path) -> Plan:
    return plan_run(
        Settings(),
        run_dir=tmp_path,
        cluster=ClusterMode.LOOPBACK,
        api_port=0,
        flower_port=0,
        autoscale_interval=5.0,
    )


def test_the_embedded_run_generates_a_redis_password_flower_auth_and_a_token(
    tmp_path: Path,
) -> None:
    first, second = _embedded_plan(tmp_path), _embedded_plan(tmp_path)
    for plan in (first, second):
        url = urlsplit(plan.settings.redis_url)
        assert plan.settings.flower_basic_auth is not None
        assert url.hostname == "127.0.0.1"  # still loopback only
        assert url.password and len(unquote(url.password)) >= 24
        user, _, password = plan.settings.flower_basic_auth.partition(":")
        assert user and len(password) >= 18
        assert plan.settings.api_token and not plan.settings.api_auth_disabled
    # Generated per run, never a constant.
    assert first.settings.redis_url != second.settings.redis_url
    assert first.settings.flower_basic_auth != second.settings.flower_basic_auth


def test_the_env_file_holds_the_secrets_and_is_private(tmp_path: Path) -> None:
    plan = _embedded_plan(tmp_path)
    path = write_client_env(plan)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    settings = plan.settings
    for name in ("TRAINSCALER_API_TOKEN", "TRAINSCALER_REDIS_URL", "TRAINSCALER_FLOWER_BASIC_AUTH"):
        assert f"export {name}=" in text
    assert f"{settings.flower_basic_auth}" in text and f"{settings.api_token}" in text
    assert settings.flower_basic_auth and settings.api_token


def test_a_preexisting_env_file_is_made_private(tmp_path: Path) -> None:
    plan = _embedded_plan(tmp_path)
    (tmp_path / "env").write_text("old")
    (tmp_path / "env").chmod(0o644)
    assert stat.S_IMODE(write_client_env(plan).stat().st_mode) == 0o600


@pytest.mark.parametrize("password", ["p@ss/w:rd#?%", "plain", 'q"uo\\te'])
def test_redis_urls_encode_the_password(password: str) -> None:
    url = urlsplit(redis_url(host="127.0.0.1", port=6379, password=password))
    assert url.hostname == "127.0.0.1" and url.port == 6379
    assert unquote(url.password or "") == password


def test_the_redis_config_is_private_and_quotes_the_password(tmp_path: Path) -> None:
    path = write_password_config(tmp_path / "redis.conf", 'q"uo\\te')
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == 'requirepass "q\\"uo\\\\te"\n'


@pytest.mark.parametrize("password", ["p@ss/w:rd#?%", "plain", "sp ace"])
def test_a_separate_redis_password_is_url_encoded_into_the_url(password: str) -> None:
    import redis
    from kombu import Connection  # type: ignore[attr-defined]

    settings = Settings(redis_url="redis://trainscaler-redis:6379/0", redis_password=password)
    pool = redis.Redis.from_url(settings.redis_url).connection_pool.connection_kwargs
    assert pool["password"] == password and pool["host"] == "trainscaler-redis"
    assert Connection(settings.redis_url).password == password  # Celery's broker too
    assert password not in repr(settings)
    # A child rebuilt from the dumped settings gets the same URL.
    assert Settings.model_validate(settings.model_dump()).redis_url == settings.redis_url
