"""keystoneauth's options, in the groups of the services Exosuit calls ([placement],
[nova], [glance], [service_user]) and in [agent]: imported only when a configuration
asks for them (an agent without Keystone never imports keystoneauth)."""

from __future__ import annotations

from oslo_config import cfg

__all__ = ["adapter_session_and_auth_opts", "session_and_auth_opts"]


def adapter_session_and_auth_opts(service_type: str) -> list[cfg.Opt]:
    """keystoneauth's session, auth (auth_type, auth_section; the plugin's own options
    are read when the client is built) and adapter options, as Nova and Cyborg have."""
    from keystoneauth1 import loading as ks_loading

    adapter = ks_loading.get_adapter_conf_options(include_deprecated=False)
    for opt in adapter:
        if opt.dest == "service_type":
            opt.default = service_type
        elif opt.dest == "valid_interfaces":
            opt.default = ["internal", "public"]
    return session_and_auth_opts() + list(adapter)


def session_and_auth_opts() -> list[cfg.Opt]:
    """keystoneauth's session options (a 30 s timeout by default, not forever) and its
    auth_type/auth_section."""
    from keystoneauth1 import loading as ks_loading

    session = ks_loading.get_session_conf_options()
    for opt in session:
        if opt.dest == "timeout":
            opt.default = 30
    return list(session) + list(ks_loading.get_auth_common_conf_options())
