"""What the program handlers share (deployables' program, the agent's reports, binds):
the PROGRAM shape, an image named by a request resolved into what a program loads,
and the bounded wait of the calls below microversion 2.6 (doc/programming.md).

It holds no handler, so it lives beside exosuit/api/handlers/, not in it: the handlers
of deployables, agent_programs and arqs and the claim saga (claim_saga.py) use it."""

from __future__ import annotations

import time
from typing import Any

from exosuit import exceptions
from exosuit.api import wsgi
from exosuit.db import arqs as arqs_db
from exosuit.db import programs as db
from exosuit.glance import sources
from exosuit.schemas.profile_groups import BITSTREAM_ID, FUNCTION_ID, ProfileGroup

__all__ = ["bind_needs", "failure", "group_need", "resolve", "serialize", "wait_for_end"]

# How often a waiting request looks at its program: from the first to the last, doubling.
_POLL_FIRST, _POLL_MAX = 0.1, 1.0


def serialize(program: dict[str, Any]) -> dict[str, Any]:
    """PROGRAM (doc/programming.md)."""
    return {
        "uuid": program["uuid"],
        "deployable_uuid": program["deployable_uuid"],
        "device_uuid": program["device_uuid"],
        "hostname": program["hostname"],
        "image_uuid": program["image_uuid"],
        "image_source": program["image_source"],
        "function_id": program["function_id"],
        "state": program["state"],
        "reason": program["reason"],
        "previous_image_uuid": program["previous_image_uuid"],
        "restored": program["restored"],
        "arq_uuid": program["arq_uuid"],
        "created_at": wsgi.format_time(program["created_at"]),
        "updated_at": wsgi.format_time(program["updated_at"]),
        "finished_at": wsgi.format_time(program["finished_at"]),
    }


def _image(ref: sources.ImageRef) -> db.Image:
    return db.Image(
        uuid=ref.uuid,
        source=ref.source,
        format=ref.format,
        size=ref.size,
        sha256=ref.sha256,
        function_id=ref.function_id,
        interface_id=ref.interface_id,
    )


def resolve(req: wsgi.Request, image_uuid: str, project_id: str | None) -> db.Image:
    """The image ``image_uuid`` as ``project_id`` (and the caller's roles and token) may
    see it: ImageNotFound, ImageNotActive, ImageInvalid, GlanceError."""
    ref = sources.resolve_image(
        req.app.conf,
        req.app.db,
        image_uuid,
        project_id=project_id,
        is_admin=req.context.is_admin_role,
        token=req.context.auth_token,
    )
    return _image(ref)


def group_need(
    req: wsgi.Request, project_id: str | None, group: ProfileGroup
) -> arqs_db.ProgramNeed:
    """What one profile group asks to be loaded, resolved (or why it cannot be)."""
    bitstream, function = group.bitstream_id, group.function_id
    if bitstream is not None and function is not None:
        return arqs_db.ProgramNeed(
            error=f"the profile group has both {BITSTREAM_ID} and {FUNCTION_ID}"
        )
    try:
        if bitstream is not None:
            return arqs_db.ProgramNeed(bitstream, resolve(req, bitstream, project_id))
        ref = sources.find_by_function(
            req.app.conf,
            req.app.db,
            function or "",
            project_id=project_id,
            is_admin=req.context.is_admin_role,
            token=req.context.auth_token,
        )
        return arqs_db.ProgramNeed(image=_image(ref))
    except (exceptions.NotFound, exceptions.Conflict, exceptions.ImageInvalid) as error:
        return arqs_db.ProgramNeed(bitstream, error=error.message)
    except exceptions.GlanceError as error:
        return arqs_db.ProgramNeed(bitstream, error=f"the image could not be looked up: {error}")


def bind_needs(
    req: wsgi.Request, bindings: list[arqs_db.Binding], scope: arqs_db.Scope
) -> dict[str, arqs_db.ProgramNeed]:
    """By ARQ uuid, what the binds' profile groups ask to be loaded, resolved before the
    bind's transaction (Glance is an HTTP call): as the ARQ's project sees images."""
    groups = req.app.db.read(arqs_db.program_groups, [b.uuid for b in bindings], scope)
    projects = {b.uuid: b.project_id for b in bindings}
    resolved: dict[tuple[str | None, str], arqs_db.ProgramNeed] = {}
    needs = {}
    for uuid, (project_id, group) in groups.items():
        project = projects.get(uuid) or project_id
        key = (project, repr(sorted(group.entries.items())))
        if key not in resolved:
            resolved[key] = group_need(req, project, group)
        needs[uuid] = resolved[key]
    return needs


def wait_for_end(req: wsgi.Request, uuid: str, seconds: float) -> dict[str, Any]:
    """The program once it ended, or as it is after ``seconds``."""
    deadline = time.monotonic() + seconds
    delay = _POLL_FIRST
    while True:
        program: dict[str, Any] = req.app.db.read(db.get, uuid)
        left = deadline - time.monotonic()
        if program["state"] in db.ENDED or left <= 0:
            return program
        time.sleep(min(delay, left))
        delay = min(delay * 2, _POLL_MAX)


def failure(program: dict[str, Any]) -> exceptions.ProgramFailed:
    """The 409 of a failed program below 2.6: its reason and what became of the device."""
    restored = {
        True: "the previous image was loaded again",
        False: "the previous image could not be restored: the device is disabled",
        None: "nothing was restored: there was no previous image, or the device was not touched",
    }[program["restored"]]
    reason = f"{program['reason'] or 'no reason given'} (program {program['uuid']}; {restored})"
    return exceptions.ProgramFailed(uuid=program["deployable_uuid"], reason=reason)
