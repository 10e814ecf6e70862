"""[nova]: the service credentials Exosuit notifies Nova with (os-server-external-events):
keystoneauth's options alone."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf import _keystoneauth
from exosuit.conf._values import optional_text

__all__ = ["GROUP", "OPTIONS", "NovaSettings", "options"]

GROUP = "nova"

# Exosuit declares none of its own.
OPTIONS: list[cfg.Opt] = []


def options() -> list[cfg.Opt]:
    """Every option of the group: keystoneauth's (imports keystoneauth)."""
    return list(OPTIONS) + _keystoneauth.adapter_session_and_auth_opts("compute")


@dataclasses.dataclass(frozen=True)
class NovaSettings:
    """What Exosuit reads itself of ``[nova]`` (keystoneauth reads the rest when the
    client is built): ``auth_type``, None without credentials."""

    auth_type: str | None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> NovaSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.nova
        return cls(auth_type=optional_text(group.auth_type))
