"""Exosuit's image catalogue (microversion 2.6): the rows of ``images`` and
``image_members``, and who sees which (doc/programming.md, "Images").

Visibility: an admin sees every image; anyone else sees the images their project
owns, the ``public`` ones, and the ``shared`` ones their project is a member of. An
image that is not visible is *not found*, exactly as an absent one: a caller learns
nothing of other projects' images. Who may change a visible image (its owner's
project, an admin) is a policy asked by the API with the image's owner as target.

An image's data never changes: ``queued`` (no data yet) becomes ``active`` once, by
compare-and-set, with its size and SHA-256 (the data itself is a file the API keeps,
exosuit/glance/catalogue.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid as uuidlib
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit import exceptions
from exosuit.db import audit, models
from exosuit.db.pagination import Page, paginate

__all__ = [
    "ACTIVE",
    "FILTERS",
    "QUEUED",
    "SORT_COLUMNS",
    "VISIBILITIES",
    "ImageMember",
    "ImageRow",
    "Viewer",
    "activate",
    "add_member",
    "create",
    "delete",
    "find_by_function",
    "get",
    "get_any",
    "list_images",
    "list_members",
    "program_using",
    "remove_member",
]

images = models.images
members = models.image_members
programs = models.programs

QUEUED = "queued"
ACTIVE = "active"
VISIBILITIES = ("private", "shared", "public")
# Query filters of the list: each an exact match on its column.
FILTERS = ("visibility", "name", "vendor", "function_id", "format", "status")
SORT_COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "created_at": images.c.created_at,
    "name": images.c.name,
    # Keyset paging needs a sort value that is never NULL: an image never updated
    # was last updated when it was created.
    "updated_at": sa.func.coalesce(images.c.updated_at, images.c.created_at),
}
# The states of a program that has ended (programs.state); any other holds its image.
_ENDED = ("done", "failed")


@dataclasses.dataclass(frozen=True)
class Viewer:
    """Who asks: their project, and whether they are an admin (who sees everything)."""

    project_id: str | None
    is_admin: bool = False


def _visible(viewer: Viewer) -> sa.ColumnElement[bool]:
    if viewer.is_admin:
        return sa.true()
    if viewer.project_id is None:
        return images.c.visibility == "public"
    member = sa.exists().where(
        members.c.image_id == images.c.id, members.c.project_id == viewer.project_id
    )
    return sa.or_(
        images.c.visibility == "public",
        images.c.owner == viewer.project_id,
        sa.and_(images.c.visibility == "shared", member),
    )


def _same(conn: Connection, column: sa.ColumnElement[Any], value: str) -> sa.ColumnElement[bool]:
    """``column == value``, compared byte for byte on every database.

    NOTE: MariaDB's default collation ignores case (and trailing spaces): a filter on
    name ``FPGA`` would find ``fpga`` there and nowhere else.
    """
    if conn.dialect.name in ("mysql", "mariadb"):
        return column.collate("utf8mb4_bin") == value
    return column == value


class ImageRow(TypedDict):
    """An image of the catalogue: a row of ``images`` (models.Image says what each
    column holds)."""

    id: int
    uuid: str
    name: str
    owner: str | None
    visibility: str
    vendor: str | None
    board: str | None
    function_id: str | None
    interface_id: str | None
    format: str
    status: str
    size: int | None
    sha256: str | None
    signature: str | None
    signature_key_id: str | None
    signature_algorithm: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None


class ImageMember(TypedDict):
    """A project an image is shared with."""

    image_uuid: str
    project_id: str
    created_at: dt.datetime


def _as_dict(row: sa.RowMapping) -> ImageRow:
    return cast(ImageRow, dict(row))  # the table's columns: ImageRow's keys


def create(
    conn: Connection,
    *,
    name: str,
    format: str,
    owner: str | None,
    visibility: str = "private",
    vendor: str | None = None,
    board: str | None = None,
    function_id: str | None = None,
    interface_id: str | None = None,
    sha256: str | None = None,
    signature: str | None = None,
    signature_key_id: str | None = None,
    signature_algorithm: str | None = None,
) -> ImageRow:
    """A new ``queued`` image (no data yet) owned by project ``owner``.

    ``sha256``, when given, is what the data must hash to; ``signature`` (base64),
    ``signature_key_id`` and ``signature_algorithm`` what it must verify with."""
    if visibility not in VISIBILITIES:
        raise exceptions.Invalid(reason=f"visibility must be one of {', '.join(VISIBILITIES)}")
    values = {
        "uuid": str(uuidlib.uuid4()),
        "name": name,
        "owner": owner,
        "visibility": visibility,
        "vendor": vendor,
        "board": board,
        "function_id": function_id,
        "interface_id": interface_id,
        "format": format,
        "status": QUEUED,
        "size": None,
        "sha256": sha256.lower() if sha256 else None,
        "signature": signature,
        "signature_key_id": signature_key_id,
        "signature_algorithm": signature_algorithm,
        "created_at": models.utcnow(),
    }
    conn.execute(sa.insert(images).values(**values))
    brief = ("name", "owner", "visibility", "format", "vendor", "board", "function_id")
    audit.record(conn, "create", "image", str(values["uuid"]), None, {k: values[k] for k in brief})
    return _get(conn, str(values["uuid"]), Viewer(None, is_admin=True))


def _get(conn: Connection, uuid: str, viewer: Viewer) -> ImageRow:
    row = (
        conn.execute(sa.select(images).where(images.c.uuid == uuid, _visible(viewer)))
        .mappings()
        .first()
    )
    if row is None:
        raise exceptions.ImageNotFound(uuid=uuid)
    return _as_dict(row)


def get(conn: Connection, uuid: str, *, viewer: Viewer) -> ImageRow:
    """The image, if ``viewer`` may see it; ImageNotFound otherwise (absent or not)."""
    return _get(conn, uuid.lower(), viewer)


def get_any(conn: Connection, uuid: str) -> ImageRow:
    """The image whoever owns it (the agent API, which serves any host); ImageNotFound."""
    return _get(conn, uuid.lower(), Viewer(None, is_admin=True))


def list_images(
    conn: Connection,
    *,
    viewer: Viewer,
    filters: dict[str, str] | None = None,
    page: Page | None = None,
) -> list[ImageRow]:
    """The images ``viewer`` sees, matching ``filters`` (exact, on FILTERS), one page
    (one more than ``page.limit`` when more remain)."""
    visible = _visible(viewer)
    stmt = sa.select(images).where(visible)
    for name, value in (filters or {}).items():
        if name not in FILTERS:
            raise exceptions.Invalid(reason=f"images cannot be filtered by {name}")
        stmt = stmt.where(_same(conn, images.c[name], value))
    stmt = paginate(conn, stmt, images, page, SORT_COLUMNS, visible=visible)
    return [_as_dict(row) for row in conn.execute(stmt).mappings()]


def find_by_function(
    conn: Connection, function_id: str, *, viewer: Viewer, limit: int = 10
) -> list[ImageRow]:
    """The active images ``viewer`` sees whose function id is ``function_id`` (at most
    ``limit``, oldest first): one is an answer, several are ambiguous."""
    stmt = (
        sa.select(images)
        .where(
            _same(conn, images.c.function_id, function_id),
            images.c.status == ACTIVE,
            _visible(viewer),
        )
        .order_by(images.c.created_at, images.c.id)
        .limit(limit)
    )
    return [_as_dict(row) for row in conn.execute(stmt).mappings()]


def activate(conn: Connection, uuid: str, *, size: int, sha256: str) -> ImageRow:
    """``queued`` → ``active`` with the data's size and SHA-256 (compare-and-set: an
    image gets its data once). ImageHasData if it already has it, ImageNotFound if it
    was deleted meanwhile, Invalid if ``sha256`` is not the one it was created with."""
    done = conn.execute(
        sa.update(images)
        .where(
            images.c.uuid == uuid,
            images.c.status == QUEUED,
            sa.or_(images.c.sha256.is_(None), images.c.sha256 == sha256),
        )
        .values(status=ACTIVE, size=size, sha256=sha256, updated_at=models.utcnow())
    ).rowcount
    image = get_any(conn, uuid)
    if done != 1:
        if image["status"] != QUEUED:
            raise exceptions.ImageHasData(uuid=uuid)
        raise exceptions.Invalid(reason=f"image {uuid} must have SHA-256 {image['sha256']}")
    after = {"status": ACTIVE, "size": size, "sha256": sha256}
    audit.record(conn, "upload", "image", uuid, {"status": QUEUED}, after)
    return image


def program_using(conn: Connection, uuid: str) -> str | None:
    """The uuid of a program that has not ended and loads (or restores) image ``uuid``."""
    row = conn.execute(
        sa.select(programs.c.uuid)
        .where(
            sa.or_(programs.c.image_uuid == uuid, programs.c.previous_image_uuid == uuid),
            programs.c.state.not_in(_ENDED),
        )
        .limit(1)
    ).first()
    return None if row is None else str(row.uuid)


def delete(conn: Connection, uuid: str, *, viewer: Viewer) -> ImageRow:
    """Delete the image (and its members); return its row (the caller removes its data
    after the commit). ImageNotFound, ImageInUse (a program that has not ended loads
    or restores it). Whether the viewer may (its owner's project, an admin) is the
    policy's question, asked before."""
    image = get(conn, uuid, viewer=viewer)
    program = program_using(conn, image["uuid"])
    if program is not None:
        raise exceptions.ImageInUse(uuid=image["uuid"], program=program)
    conn.execute(sa.delete(members).where(members.c.image_id == image["id"]))
    conn.execute(sa.delete(images).where(images.c.id == image["id"]))
    before = {k: image[k] for k in ("name", "owner", "visibility", "status")}
    audit.record(conn, "delete", "image", image["uuid"], before, None)
    return image


# -- members (visibility "shared") -------------------------------------------------------------


def _member(row: sa.RowMapping, image: ImageRow) -> ImageMember:
    return {
        "image_uuid": image["uuid"],
        "project_id": row["project_id"],
        "created_at": row["created_at"],
    }


def list_members(conn: Connection, uuid: str, *, viewer: Viewer) -> list[ImageMember]:
    """The projects the image is shared with, oldest membership first."""
    image = get(conn, uuid, viewer=viewer)
    stmt = sa.select(members).where(members.c.image_id == image["id"])
    rows = conn.execute(stmt.order_by(members.c.created_at, members.c.project_id)).mappings()
    return [_member(row, image) for row in rows]


def add_member(conn: Connection, uuid: str, project_id: str, *, viewer: Viewer) -> ImageMember:
    """Share the image with ``project_id`` (idempotent: the existing membership comes
    back). Invalid unless the image is ``shared``."""
    image = get(conn, uuid, viewer=viewer)
    if image["visibility"] != "shared":
        raise exceptions.Invalid(
            reason=f"image {image['uuid']} is {image['visibility']}: only a shared "
            "image has members"
        )
    where = sa.and_(
        members.c.image_id == image["id"], _same(conn, members.c.project_id, project_id)
    )
    row = conn.execute(sa.select(members).where(where)).mappings().first()
    if row is None:
        insert = sa.insert(members).values(
            image_id=image["id"], project_id=project_id, created_at=models.utcnow()
        )
        try:
            with conn.begin_nested():
                conn.execute(insert)
            after = {"member": project_id}
            audit.record(conn, "member.add", "image", image["uuid"], None, after)
        except sa.exc.IntegrityError:  # a concurrent request added it: the same answer
            pass
        row = conn.execute(sa.select(members).where(where)).mappings().one()
    return _member(row, image)


def remove_member(conn: Connection, uuid: str, project_id: str, *, viewer: Viewer) -> None:
    """Stop sharing the image with ``project_id``; NotFound when it is no member,
    ImageNotFound when the image is not visible."""
    image = get(conn, uuid, viewer=viewer)
    removed = conn.execute(
        sa.delete(members).where(
            members.c.image_id == image["id"], _same(conn, members.c.project_id, project_id)
        )
    ).rowcount
    if removed != 1:
        raise exceptions.NotFound(f"Project {project_id} is not a member of image {image['uuid']}.")
    audit.record(conn, "member.remove", "image", image["uuid"], {"member": project_id}, None)
