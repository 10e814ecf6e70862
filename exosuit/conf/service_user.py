"""[service_user]: the service token Exosuit sends with its calls to Nova, as Nova does
with its own [service_user] section: Exosuit's switch and keystoneauth's session and
auth options (keystoneauth's own timeout default, not the 30 s of the other groups)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from exosuit.conf._values import optional_text

__all__ = ["GROUP", "OPTIONS", "ServiceUserSettings", "options"]

GROUP = "service_user"

OPTIONS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "send_service_user_token",
        default=False,
        help="Send a service token (from this section's credentials) with the calls Exosuit "
        "makes to Nova, as Nova does with its own [service_user] section.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group: Exosuit's and keystoneauth's (imports keystoneauth)."""
    from keystoneauth1 import loading as ks_loading

    return (
        list(OPTIONS)
        + list(ks_loading.get_session_conf_options())
        + list(ks_loading.get_auth_common_conf_options())
    )


@dataclasses.dataclass(frozen=True)
class ServiceUserSettings:
    """What Exosuit reads itself of ``[service_user]``: whether to send a service token,
    and ``auth_type`` (None without credentials)."""

    send_service_user_token: bool
    auth_type: str | None

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ServiceUserSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.service_user
        return cls(
            send_service_user_token=bool(group.send_service_user_token),
            auth_type=optional_text(group.auth_type),
        )
