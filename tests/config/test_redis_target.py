"""Which Redis deployment a URL, or the ``[gateway] redis_*`` settings, name (`gateway.config.redis_target`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.redis_target import RedisKind, parse_redis_url, redis_url_of
from gateway.config.settings import Settings
from gateway.errors import ConfigError


def test_a_single_node_url_goes_to_redis_py_whole() -> None:
    """``redis://`` and ``rediss://`` (TLS, an ACL user and password) are one node, read by redis-py."""
    plain = parse_redis_url("redis://127.0.0.1:6379/2")
    tls = parse_redis_url("rediss://cs:s3cret@redis.example:6380/0")
    assert (plain.kind, plain.tls) == (RedisKind.SINGLE, False)
    assert (tls.kind, tls.tls, tls.url) == (RedisKind.SINGLE, True, "rediss://cs:s3cret@redis.example:6380/0")


def test_a_sentinel_url_names_its_sentinels_master_and_credentials() -> None:
    target = parse_redis_url("rediss+sentinel://cs:p%40ss@10.0.0.1:26379,10.0.0.2:26380/mymaster/3")
    assert target.kind is RedisKind.SENTINEL
    assert target.nodes == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (target.master, target.db, target.tls) == ("mymaster", 3, True)
    assert (target.username, target.password) == ("cs", "p@ss")


def test_a_cluster_url_names_its_seed_nodes() -> None:
    target = parse_redis_url("redis+cluster://a:7000,[::1]:7001")
    assert (target.kind, target.nodes, target.master) == (RedisKind.CLUSTER, (("a", 7000), ("::1", 7001)), None)


def test_a_target_repr_shows_no_password() -> None:
    assert "s3cret" not in repr(parse_redis_url("redis+cluster://u:s3cret@a:7000"))


@pytest.mark.parametrize(
    "url",
    [
        "localhost:6379",
        "http://localhost:6379",
        "redis+sentinel://a:26379",  # no master
        "redis+sentinel:///mymaster",  # no sentinel
        "redis+cluster://a:notaport",
        "redis+cluster://a:0",
        "redis+cluster://a:7000/1",  # a cluster has db 0 only
        "redis+sentinel://a:26379/m/x",
    ],
)
def test_a_url_that_names_no_deployment_is_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_redis_url(url)


@given(st.text(max_size=40))
def test_any_text_is_read_or_refused_with_a_config_error(text: str) -> None:
    """Whatever an operator writes, the answer is a target or a `ConfigError`, never another exception."""
    for url in (text, f"redis+sentinel://{text}", f"redis+cluster://{text}"):
        try:
            parse_redis_url(url)
        except ConfigError:
            pass


def test_the_settings_build_the_url_of_a_sentinel_or_cluster_deployment(tmp_path: Path) -> None:
    """The file's parts make the same URL an operator could give whole; the password comes from the environment."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[gateway]\nredis_sentinels = ["s1:26379", "s2:26379"]\nredis_master_name = "mymaster"\n'
        'redis_username = "cs"\nredis_password_env = "PW"\n'
    )
    settings = Settings.load({"PW": "a/b@c"}, config)
    assert settings.redis_url == "redis+sentinel://cs:a%2Fb%40c@s1:26379,s2:26379/mymaster"
    assert parse_redis_url(settings.redis_url).password == "a/b@c"
    config.write_text('[gateway]\nredis_cluster_nodes = ["n1:7000"]\nredis_tls = true\n')
    assert Settings.load({}, config).redis_url == "rediss+cluster://n1:7000"


@pytest.mark.parametrize(
    "body",
    [
        'redis_sentinels = ["s:1"]\n',  # no master name
        'redis_sentinels = ["s:1"]\nredis_master_name = "m"\nredis_cluster_nodes = ["n:1"]\n',
        'redis_url = "redis://x:1"\nredis_cluster_nodes = ["n:1"]\n',
        'redis_cluster_nodes = ["n:1"]\nredis_password_env = "UNSET"\n',
    ],
)
def test_settings_that_contradict_each_other_are_refused(tmp_path: Path, body: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f"[gateway]\n{body}")
    with pytest.raises(ConfigError):
        Settings.load({}, config)


def test_the_url_of_no_deployment_is_none() -> None:
    none = redis_url_of(sentinels=None, master=None, cluster_nodes=None, username=None, password=None, tls=False)
    assert none is None
