"""The dashboard's sign-in: a user name and password exchanged for a Keystone token.

The API never keeps the password nor the token: it asks Keystone (the public URL
``[keystone_authtoken] www_authenticate_uri``, else ``auth_url``) for a token scoped to
the named project and hands it to the browser, which sends it as ``X-Auth-Token``
like any client; keystonemiddleware then validates it as usual.

keystoneauth's errors are translated here, once, into the two below.
"""

from __future__ import annotations

import dataclasses

from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import generic
from oslo_config import cfg

__all__ = ["KeystoneUnavailable", "SignInRefused", "SignedIn", "keystone_url", "sign_in"]

TIMEOUT = 30.0


class SignInRefused(Exception):
    """Keystone refused the credentials (unknown user, wrong password, no role on
    the project)."""


class KeystoneUnavailable(Exception):
    """Keystone is not configured, unreachable, or answered with an error."""


@dataclasses.dataclass(frozen=True)
class SignedIn:
    token: str
    expires_at: str | None
    user: str
    project: str
    roles: tuple[str, ...]


def keystone_url(conf: cfg.ConfigOpts) -> str | None:
    """Keystone's public URL from ``[keystone_authtoken]`` (None when unset)."""
    if "keystone_authtoken" not in conf:
        return None
    group = conf.keystone_authtoken
    for name in ("www_authenticate_uri", "auth_url"):
        # auth_url is the auth plugin's option: registered only once a plugin loaded.
        if name in group and group[name]:
            return str(group[name])
    return None


def sign_in(
    conf: cfg.ConfigOpts,
    *,
    username: str,
    password: str,
    project_name: str,
    user_domain_name: str = "Default",
    project_domain_name: str = "Default",
) -> SignedIn:
    """A new project-scoped token of ``username``; SignInRefused or KeystoneUnavailable."""
    url = keystone_url(conf)
    if url is None:
        raise KeystoneUnavailable("[keystone_authtoken] www_authenticate_uri is not set.")
    group = conf.keystone_authtoken
    verify: bool | str = group.cafile or not group.insecure
    session = ks_session.Session(verify=verify, timeout=TIMEOUT)
    # generic.Password discovers the identity API: the URL may end in /v3 or not.
    auth = generic.Password(
        auth_url=url,
        username=username,
        password=password,
        user_domain_name=user_domain_name,
        project_name=project_name,
        project_domain_name=project_domain_name,
    )
    try:
        access = auth.get_access(session)
    except ks_exceptions.Unauthorized:
        raise SignInRefused(
            "Keystone refused these credentials (user, password, project or domains)."
        ) from None
    except ks_exceptions.ClientException as error:
        if getattr(error, "http_status", None) in (400, 403, 404):
            raise SignInRefused(f"Keystone refused the sign-in: {error}") from None
        raise KeystoneUnavailable(f"Keystone at {url} did not answer: {error}") from error
    finally:
        session.session.close()
    if not access.auth_token:
        raise KeystoneUnavailable(f"Keystone at {url} answered without a token.")
    expires = access.expires.isoformat() if access.expires is not None else None
    return SignedIn(
        token=access.auth_token,
        expires_at=expires,
        user=access.username or username,
        project=access.project_name or project_name,
        roles=tuple(access.role_names or ()),
    )
