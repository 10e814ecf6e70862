"""[glance]: Glance, where images may come from: with an auth plugin the service user
reads them; without one, the caller's token is used (keystonemiddleware's), as Cyborg
does. keystoneauth's options alone."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf import _keystoneauth
from exosuit.conf._values import optional_text

__all__ = ["GROUP", "OPTIONS", "GlanceSettings", "options"]

GROUP = "glance"

# Exosuit declares none of its own.
OPTIONS: list[cfg.Opt] = []


def options() -> list[cfg.Opt]:
    """Every option of the group: keystoneauth's (imports keystoneauth)."""
    return list(OPTIONS) + _keystoneauth.adapter_session_and_auth_opts("image")


@dataclasses.dataclass(frozen=True)
class GlanceSettings:
    """What Exosuit reads itself of ``[glance]`` (keystoneauth reads the rest when the
    client is built): ``auth_type``, None without a service user."""

    auth_type: str | None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> GlanceSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.glance
        return cls(auth_type=optional_text(group.auth_type))
