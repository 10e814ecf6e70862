"""Configuration options (oslo.config), passed around explicitly, never global.

One module per option group (``exosuit/conf/<group>.py``, ``default.py`` for
[DEFAULT]): its ``OPTIONS``, its ``options()`` (with keystoneauth's, for the groups of
the services Exosuit calls) and its typed, frozen settings (``DatabaseSettings`` …),
built from a configuration by ``from_conf``, so that a reader gets an ``int`` where
oslo.config gives ``Any``. This module assembles them: ``make_conf`` (the server's
processes), ``make_agent_conf`` (the agent's), ``list_opts`` (the sample).

Every option has a default, so the embedded default (``exosuit serve``) needs no
file. ``exosuit-manage config-sample`` (or ``oslo-config-generator --namespace
exosuit``) prints a sample configuration file.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from oslo_config import cfg

from exosuit.conf import (
    accelerator_requests,
    agent,
    api,
    audit,
    cdi,
    claims,
    conductor,
    dashboard,
    database,
    default,
    glance,
    health,
    images,
    inventory,
    nova,
    placement,
    serve,
    service_user,
)
from exosuit.conf._keystoneauth import session_and_auth_opts
from exosuit.conf.accelerator_requests import AcceleratorRequestsSettings
from exosuit.conf.agent import AgentSettings
from exosuit.conf.api import ApiSettings
from exosuit.conf.audit import AuditSettings
from exosuit.conf.cdi import CdiSettings
from exosuit.conf.claims import ClaimsSettings
from exosuit.conf.conductor import ConductorSettings
from exosuit.conf.dashboard import DashboardSettings
from exosuit.conf.database import DatabaseSettings
from exosuit.conf.default import DefaultSettings
from exosuit.conf.glance import GlanceSettings
from exosuit.conf.health import HealthGroupSettings
from exosuit.conf.images import ImagesSettings
from exosuit.conf.inventory import InventorySettings
from exosuit.conf.nova import NovaSettings
from exosuit.conf.placement import PlacementSettings
from exosuit.conf.serve import ServeSettings
from exosuit.conf.service_user import ServiceUserSettings

__all__ = [
    "GROUPS",
    "SETTINGS",
    "AcceleratorRequestsSettings",
    "AgentSettings",
    "ApiSettings",
    "AuditSettings",
    "CdiSettings",
    "ClaimsSettings",
    "ConductorSettings",
    "DashboardSettings",
    "DatabaseSettings",
    "DefaultSettings",
    "GlanceSettings",
    "HealthGroupSettings",
    "ImagesSettings",
    "InventorySettings",
    "NovaSettings",
    "PlacementSettings",
    "ServeSettings",
    "ServiceUserSettings",
    "driver_settings",
    "list_opts",
    "make_agent_conf",
    "make_conf",
    "register_agent_keystone_opts",
    "register_opts",
]

# Exosuit's groups, in the order of the sample: each module's GROUP, OPTIONS, options()
# and settings type.
GROUPS = (
    default,
    api,
    accelerator_requests,
    inventory,
    database,
    agent,
    cdi,
    serve,
    conductor,
    claims,
    audit,
    health,
    dashboard,
    placement,
    nova,
    images,
    glance,
    service_user,
)


@functools.cache
def _groups() -> dict[str | None, Sequence[cfg.Opt]]:
    """Options by group (None: [DEFAULT]). Built once, when first asked: keystoneauth's
    options need keystoneauth, which an agent without Keystone never imports
    (``make_agent_conf``)."""
    return {module.GROUP: module.options() for module in GROUPS}


def _driver_groups() -> dict[str | None, list[cfg.Opt]]:
    """Each installed driver's options, in the group named after the driver (keyed as
    ``_groups`` is, so that the two merge)."""
    from exosuit.drivers import available_drivers, driver_class

    groups: dict[str | None, list[cfg.Opt]] = {}
    for name in available_drivers():
        options = getattr(driver_class(name), "OPTIONS", None)
        if options:
            groups[name] = list(options)
    return groups


def _notification_groups() -> dict[str | None, list[cfg.Opt]]:
    """oslo.messaging's ``[oslo_messaging_notifications]`` (driver, transport_url, topics,
    retry): the server processes' (API, conductor, ``exosuit serve``, exosuit-manage), so
    that ``driver = messagingv2`` and a ``transport_url`` turn the audit trail's
    notifications on (doc/audit.md). Not the agent's (``make_agent_conf``): oslo.messaging
    is a heavy import an agent never needs."""
    from exosuit import notifications

    return {notifications.GROUP: notifications.options()}


def _all_groups() -> dict[str | None, Sequence[cfg.Opt]]:
    return {**_groups(), **_notification_groups(), **_driver_groups()}


def register_opts(conf: cfg.ConfigOpts) -> None:
    for group, opts in _all_groups().items():
        conf.register_opts(opts, group=group)


def driver_settings(conf: cfg.ConfigOpts, name: str) -> dict[str, Any]:
    """The values of a driver's configuration group, as a plain dict (its options
    registered first if the configuration does not have them yet: the agent's registers
    only the drivers it loads)."""
    if name not in conf:
        _register_driver_opts(conf, name)
    if name not in conf:
        return {}
    group = conf[name]
    return {opt: group[opt] for opt in group}


def _register_driver_opts(conf: cfg.ConfigOpts, name: str) -> None:
    """Register the options of the installed driver ``name`` (that driver alone is
    imported); nothing for a driver that is not installed or has none."""
    from exosuit.drivers import driver_class

    try:
        options = getattr(driver_class(name), "OPTIONS", None)
    except LookupError:
        return
    if options:
        conf.register_opts(list(options), group=name)


def list_opts() -> list[tuple[str | None, Sequence[cfg.Opt]]]:
    """The oslo-config-generator hook (namespace ``exosuit``)."""
    return list(_all_groups().items())


def register_agent_keystone_opts(conf: cfg.ConfigOpts) -> None:
    """keystoneauth's session and auth options in [agent] (imports keystoneauth)."""
    conf.register_opts(session_and_auth_opts(), group=agent.GROUP)


def make_agent_conf(config_files: list[str] | None = None) -> cfg.ConfigOpts:
    """The configuration of ``exosuit-agent run``: [DEFAULT], [agent] and [cdi] only,
    each driver's section registered when the agent loads that driver. keystoneauth's
    [agent] options (and so keystoneauth) only when the agent needs them: ``api_url`` is
    not plain ``http://`` (the catalog, or TLS), or the files set a Keystone or TLS key
    in [agent]; otherwise [agent] ``timeout`` alone, as keystoneauth declares it."""
    conf = cfg.ConfigOpts()
    conf.register_opts(default.OPTIONS)
    conf.register_opts(agent.OPTIONS, group=agent.GROUP)
    conf.register_opts(cdi.OPTIONS, group=cdi.GROUP)
    files = _existing(config_files)
    sections: dict[str, dict[str, list[str]]] = {}
    for f in files:
        cfg.ConfigParser(f, sections).parse()
    found = sections.get(agent.GROUP, {})
    url = (found.get("api_url") or [""])[-1].strip()
    if not url.startswith("http://") or agent.KEYSTONE_KEYS & set(found):
        register_agent_keystone_opts(conf)
    else:
        conf.register_opt(agent.AGENT_TIMEOUT, group=agent.GROUP)
    conf([], project="exosuit", default_config_files=files, validate_default_values=True)
    return conf


def _existing(config_files: list[str] | None) -> list[str]:
    files = [os.path.abspath(f) for f in (config_files or [])]
    for f in files:
        if not os.path.exists(f):
            raise SystemExit(f"config file {f} does not exist")
    return files


def make_conf(config_files: list[str] | None = None, **overrides: Any) -> cfg.ConfigOpts:
    """A fresh ConfigOpts with Exosuit's options, read from ``config_files``.

    ``overrides`` are ``"group.option"`` (or ``"option"`` for DEFAULT) keys
    set after parsing; they come from command-line flags such as ``--port``.
    """
    conf = cfg.ConfigOpts()
    register_opts(conf)
    files = _existing(config_files)
    conf([], project="exosuit", default_config_files=files, validate_default_values=True)
    for key, value in overrides.items():
        group, _, name = key.rpartition(".")
        conf.set_override(name, value, group=group or None)
    return conf


# Each group's settings type, by group (None: [DEFAULT]).
SETTINGS: Mapping[str | None, type] = {
    default.GROUP: DefaultSettings,
    api.GROUP: ApiSettings,
    accelerator_requests.GROUP: AcceleratorRequestsSettings,
    inventory.GROUP: InventorySettings,
    database.GROUP: DatabaseSettings,
    agent.GROUP: AgentSettings,
    cdi.GROUP: CdiSettings,
    serve.GROUP: ServeSettings,
    conductor.GROUP: ConductorSettings,
    claims.GROUP: ClaimsSettings,
    audit.GROUP: AuditSettings,
    health.GROUP: HealthGroupSettings,
    dashboard.GROUP: DashboardSettings,
    placement.GROUP: PlacementSettings,
    nova.GROUP: NovaSettings,
    images.GROUP: ImagesSettings,
    glance.GROUP: GlanceSettings,
    service_user.GROUP: ServiceUserSettings,
}
