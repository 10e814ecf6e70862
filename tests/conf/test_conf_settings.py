"""The typed settings of each option group (exosuit/conf/<group>.py): one per group,
holding every option Exosuit declares there, with the value the configuration gives."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping

import pytest

from exosuit import conf as exosuit_conf
from exosuit.conf import (
    AgentSettings,
    ApiSettings,
    DatabaseSettings,
    DefaultSettings,
    HealthGroupSettings,
    make_agent_conf,
    make_conf,
)
from exosuit.drivers import health as driver_health

# What each settings type reads of keystoneauth's options in its group (the rest of them
# keystoneauth reads itself when a client is built).
KEYSTONEAUTH_READ = {
    "agent": {"timeout"},
    "placement": {"auth_type", "endpoint_override"},
    "nova": {"auth_type"},
    "glance": {"auth_type"},
    "service_user": {"auth_type"},
}


@pytest.fixture(scope="module")
def default_conf():
    """The configuration without a file: every option at its default."""
    return make_conf([])


def test_every_group_has_a_settings_type_and_no_type_is_stale():
    assert set(exosuit_conf.SETTINGS) == {module.GROUP for module in exosuit_conf.GROUPS}
    assert [module.GROUP for module in exosuit_conf.GROUPS] == [
        group for group, _ in exosuit_conf.list_opts()[: len(exosuit_conf.GROUPS)]
    ]


@pytest.mark.parametrize("module", exosuit_conf.GROUPS, ids=lambda m: str(m.GROUP))
def test_a_settings_type_holds_every_option_of_its_group(module):
    settings = exosuit_conf.SETTINGS[module.GROUP]
    assert dataclasses.is_dataclass(settings)
    assert settings.__dataclass_params__.frozen
    fields = {field.name for field in dataclasses.fields(settings)}
    own = {opt.dest for opt in module.OPTIONS}
    if module.GROUP == "health":  # the drivers' thresholds, typed by them
        assert fields == own | {"thresholds"}
    else:
        assert fields == own | KEYSTONEAUTH_READ.get(module.GROUP, set())


def _declared(settings: type, name: str) -> object:
    hints = typing.get_type_hints(settings, vars(driver_health))
    return hints[name]


def _of_type(value: object, declared: object) -> bool:
    """Whether ``value`` is what the annotation ``declared`` says (the types used here)."""
    origin = typing.get_origin(declared)
    if origin in (types.UnionType, typing.Union):
        return any(_of_type(value, arm) for arm in typing.get_args(declared))
    if origin is tuple:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    if origin is Mapping or declared is Mapping:
        return isinstance(value, Mapping)
    if declared is type(None):
        return value is None
    if declared is float:
        return isinstance(value, float)
    return isinstance(value, typing.cast(type, declared))


@pytest.mark.parametrize("module", exosuit_conf.GROUPS, ids=lambda m: str(m.GROUP))
def test_the_settings_hold_the_configurations_values_with_their_declared_types(module, tmp_path):
    conf = make_conf([])
    settings_type = exosuit_conf.SETTINGS[module.GROUP]
    settings = settings_type.from_conf(conf)
    section = conf if module.GROUP is None else conf[module.GROUP]
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if field.name == "thresholds":
            assert isinstance(value, driver_health.HealthSettings)
            continue
        assert _of_type(value, _declared(settings_type, field.name)), (field.name, value)
        raw = section[field.name]
        if isinstance(raw, list):
            assert value == tuple(raw)
        elif isinstance(raw, dict) and module.GROUP == "accelerator_requests":
            assert value == {k: int(v) for k, v in raw.items()}
        elif field.name == "api_url":
            assert value == (raw or "")
        else:
            assert value == raw, field.name


def test_settings_follow_the_files_and_the_overrides(tmp_path):
    path = tmp_path / "exosuit.conf"
    path.write_text(
        "[DEFAULT]\nhost = node-7\ndebug = true\n"
        "[api]\nport = 7001\npublic_routes = /,/v2\ninventory_wait = 2\n"
        "[database]\nstartup_wait = 5\n"
        "[health]\nrecover_after = 9\nxid_unhealthy = 48,79\n"
    )
    conf = make_conf([str(path)], **{"api.workers": 3})
    assert DefaultSettings.from_conf(conf).host == "node-7"
    assert DefaultSettings.from_conf(conf).debug is True
    api = ApiSettings.from_conf(conf)
    assert (api.port, api.workers, api.public_routes) == (7001, 3, ("/", "/v2"))
    assert api.inventory_wait == 2.0 and isinstance(api.inventory_wait, float)
    assert DatabaseSettings.from_conf(conf).startup_wait == 5
    health = HealthGroupSettings.from_conf(conf)
    assert health.recover_after == 9
    assert health.thresholds.xid_unhealthy == frozenset({48, 79})


def test_settings_are_frozen(default_conf):
    api = ApiSettings.from_conf(default_conf)
    with pytest.raises(dataclasses.FrozenInstanceError):
        api.port = 1
    limits = exosuit_conf.AcceleratorRequestsSettings.from_conf(
        make_conf([])
    ).attach_handles_per_unit
    with pytest.raises(TypeError):
        limits["CUSTOM_X"] = 1


def test_the_agent_reads_its_settings_from_its_own_lean_configuration(tmp_path):
    path = tmp_path / "agent.conf"
    path.write_text("[agent]\napi_url = http://127.0.0.1:9\ntimeout = 7\n")
    agent = AgentSettings.from_conf(make_agent_conf([str(path)]))
    assert agent.api_url == "http://127.0.0.1:9"
    assert agent.timeout == 7.0
    assert agent.enabled_drivers[0] == "pci"
