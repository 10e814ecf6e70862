"""Attach a device profile's devices to a server, detach them (microversion 2.10).

A server is a consumer, by its id. Which one it is decides the path:

* **Nova's server** (``[nova]`` is configured and Nova, asked ``GET /servers/{id}`` with
  the caller's token, knows it): Nova 34 never changes an existing server's
  accelerators, so neither does Exosuit: 409 ``exosuit.server.nova_managed`` quoting
  Nova's refusals (``NOVA_REFUSALS``, what Nova answers a resize and an accelerator
  port's attach) and the supported path, a new server whose flavor names the profile.
  The caller's token, not ``[nova]``'s user: Nova shows a server only to its project and
  to admins, and a service user holds neither role (doc/nova.md "Attach and detach").
* **Any other id** (no Nova configured, as ``exosuit serve``; or a server Nova does not
  know): a standalone consumer. Attach is the claim of that consumer
  (exosuit/api/claim_saga.py ``make``, ``consumer`` = the server id): idempotent, one
  claim per server; detach releases that consumer's live claims (of one profile, if
  named).

Detach asks Nova only when the server holds no claim: releasing Exosuit's own claims
never waits for Nova.
"""

from __future__ import annotations

from typing import Any

from exosuit import exceptions
from exosuit.api import claim_saga, wsgi
from exosuit.db import Connection
from exosuit.db import claims as db
from exosuit.nova import client as nova

__all__ = ["NOVA_REFUSALS", "attach", "detach", "nova_server"]

# What Nova 34 answers (400) when asked to change an instance's accelerators, quoted
# (tests/nova/test_real_nova_attach.py asks the real Nova and compares).
NOVA_REFUSALS = {
    "ForbiddenWithAccelerators": "Feature not supported with instances that have accelerators.",
    "ForbiddenPortsWithAccelerator": "Feature not supported with Ports that have accelerators.",
}
_REFUSAL = (
    "Nova does not change an existing server's accelerators: it refuses a resize to or "
    f'from a flavor with accel:device_profile (ForbiddenWithAccelerators: "'
    f'{NOVA_REFUSALS["ForbiddenWithAccelerators"]}") and the attach or detach of a port '
    f'with a device profile (ForbiddenPortsWithAccelerator: "'
    f'{NOVA_REFUSALS["ForbiddenPortsWithAccelerator"]}").'
)
# Claims of a consumer that still hold (or held until a program failed) its devices.
_LIVE = (db.PENDING, db.BOUND, db.FAILED)


def nova_server(req: wsgi.Request, server: str) -> dict[str, Any] | None:
    """Nova's server ``server`` as the caller sees it; None without ``[nova]``, for an id
    that is no UUID (Nova's are), or when Nova does not know it. 503 when Nova does not
    answer (whose server it is cannot be told)."""
    if not wsgi.is_uuid_like(server):
        return None
    try:
        adapter = nova.make_adapter(req.app.conf, req.environ.get("keystone.token_auth"))
        if adapter is None:
            return None
        return nova.NovaClient(adapter).server(server)
    except exceptions.NovaUnavailable as error:
        raise wsgi.ApiError(
            503,
            f"Whether Nova manages server {server} cannot be told: {error}",
            error.code,
            headers=[("Retry-After", "2")],
        ) from None
    except exceptions.NovaError as error:
        raise wsgi.ApiError(502, str(error), error.code) from None


def _refuse_nova(req: wsgi.Request, server: str, profile: str | None, attaching: bool) -> None:
    found = nova_server(req, server)
    if found is None:
        return
    # The flavor's extra specs: in the server from compute 2.47 on, if Nova's policy
    # shows them to the caller.
    flavor = found.get("flavor")
    specs = flavor.get("extra_specs") if isinstance(flavor, dict) else None
    held = specs.get("accel:device_profile") if isinstance(specs, dict) else None
    holds = f" (its flavor's accel:device_profile: {held})" if held else ""
    if attaching:
        instead = (
            f"To give a server device profile {profile}'s devices, boot a new server with "
            f"a flavor whose extra spec accel:device_profile is {profile}."
        )
    else:
        instead = (
            "Its accelerators go with it (delete the server), or boot a new server with "
            "a flavor without accel:device_profile."
        )
    raise exceptions.ServerManagedByNova(
        server=server, holds=holds, refusal=_REFUSAL, instead=instead
    )


def attach(req: wsgi.Request, server: str, profile: str, hostname: str | None) -> db.Created:
    """The claim of consumer ``server`` for ``profile`` (on ``hostname``, or any one
    host): made, or the live one found again (``created`` False). 409
    ``exosuit.server.nova_managed`` for Nova's server, ``exosuit.server.attached`` when
    it holds another profile's claim (or this one's on another host than
    ``hostname``); the claim's own refusals otherwise."""
    _refuse_nova(req, server, profile, attaching=True)
    request = db.ClaimRequest(
        project_id=req.context.project_id,
        user_id=req.context.user_id,
        profile_name=profile,
        hostname=hostname,
        consumer=server,
    )
    # A consumer holds one live claim (exosuit/db/claims.py create): the one found may be
    # another profile's, attached before (or meanwhile).
    created = claim_saga.make(req, request)
    held, on = created.claim["device_profile_name"], created.claim["hostname"]
    if not created.created and (held != profile or hostname not in (None, on)):
        what = f"device profile {held}" if held else "attach handles named by uuid"
        raise exceptions.ServerAttached(
            server=server, claim=created.claim["uuid"], held=f"{what} on host {on}"
        )
    return created


def detach(
    req: wsgi.Request, server: str, profile: str | None, scope: db.Scope
) -> list[dict[str, Any]]:
    """Release the live claims of consumer ``server`` that ``scope`` sees (of
    ``profile`` only, when named), in one transaction; the claims as released. 404
    ``exosuit.server.not_attached`` when there are none; 409
    ``exosuit.server.nova_managed`` when the server, holding none, is Nova's."""
    live = req.app.db.read(db.list_claims, scope, states=_LIVE, consumer=server)
    chosen = [c for c in live if profile is None or c["device_profile_name"] == profile]
    if not chosen:
        if not live:
            _refuse_nova(req, server, profile, attaching=False)
        what = "" if profile is None else f" of device profile {profile}"
        why = "no live claim has it as its consumer"
        if live:
            held = ", ".join(f"{c['uuid']} ({c['device_profile_name']})" for c in live)
            why = f"it holds only {held}"
        raise exceptions.ServerNotAttached(server=server, what=what, why=why)

    def release(conn: Connection) -> list[dict[str, Any]]:
        return [
            db.release(conn, c["uuid"], scope, reason="detached from its server") for c in chosen
        ]

    released: list[dict[str, Any]] = req.app.db.write(release)
    return released
