"""Attach handles as the fleet views of microversion 2.5 show them: where each one is
(host, device, deployable) and which accelerator request holds it, if any (and the
standalone claim that holds that ARQ, 2.8).

``accelerator_requests.attach_handle_id`` is UNIQUE, so a handle has at most one
holder and the outer join yields one row per handle.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from exosuit import exceptions
from exosuit.db import models
from exosuit.db.pagination import Page, paginate

__all__ = ["SORT_COLUMNS", "AttachHandleRow", "Filters", "get", "list_attach_handles"]

ah = models.attach_handles
dep = models.deployables
dev = models.devices
arq = models.accelerator_requests
claims = models.claims

SORT_COLUMNS: dict[str, sa.ColumnElement[Any]] = {
    "created_at": ah.c.created_at,
    "uuid": ah.c.uuid,
}

_SELECT = sa.select(
    ah,
    dev.c.hostname,
    dev.c.uuid.label("device_uuid"),
    dep.c.uuid.label("deployable_uuid"),
    dep.c.name.label("deployable_name"),
    arq.c.uuid.label("arq_uuid"),
    arq.c.instance_uuid.label("arq_instance_uuid"),
    arq.c.project_id.label("arq_project_id"),
    arq.c.state.label("arq_state"),
    claims.c.uuid.label("claim_uuid"),
).select_from(
    ah.join(dep, dep.c.id == ah.c.deployable_id)
    .join(dev, dev.c.id == dep.c.device_id)
    .outerjoin(arq, arq.c.attach_handle_id == ah.c.id)
    .outerjoin(claims, claims.c.id == arq.c.claim_id)
)


class AttachHandleRow(TypedDict):
    """An attach handle as the API shows it: a row of ``attach_handles`` (``attach_info``
    decoded), where it is, and the ARQ (and claim) that holds it (None: free)."""

    id: int
    uuid: str
    deployable_id: int
    cpid_id: int | None
    in_use: bool
    attach_type: str
    attach_info: dict[str, Any]
    presence: str  # present | lost
    created_at: dt.datetime
    updated_at: dt.datetime | None
    hostname: str
    device_uuid: str
    deployable_uuid: str
    deployable_name: str
    arq_uuid: str | None
    arq_instance_uuid: str | None
    arq_project_id: str | None
    arq_state: str | None
    claim_uuid: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Filters:
    """Exact-match filters of the list; None means "any"."""

    hostname: str | None = None
    device_uuid: str | None = None
    deployable_uuid: str | None = None
    in_use: bool | None = None

    def clauses(self) -> list[sa.ColumnElement[bool]]:
        found: list[sa.ColumnElement[bool]] = []
        if self.hostname is not None:
            found.append(dev.c.hostname == self.hostname)
        if self.device_uuid is not None:
            found.append(dev.c.uuid == self.device_uuid)
        if self.deployable_uuid is not None:
            found.append(dep.c.uuid == self.deployable_uuid)
        if self.in_use is not None:
            found.append(ah.c.in_use.is_(self.in_use))
        return found


def _handle(row: Row[Any]) -> AttachHandleRow:
    """The row as a plain dict, ``attach_info`` decoded (stored as canonical JSON)."""
    handle = dict(row._mapping)
    handle["attach_info"] = json.loads(handle["attach_info"])
    handle["in_use"] = bool(handle["in_use"])
    return cast(AttachHandleRow, handle)  # _SELECT's columns are its keys


def list_attach_handles(
    conn: Connection, *, filters: Filters, page: Page | None
) -> list[AttachHandleRow]:
    """A page of handles (``page.marker``: the uuid of the last one seen), one more than
    ``page.limit`` when more remain."""
    stmt = paginate(conn, _SELECT.where(*filters.clauses()), ah, page, SORT_COLUMNS)
    return [_handle(row) for row in conn.execute(stmt)]


def get(conn: Connection, uuid: str) -> AttachHandleRow:
    row = conn.execute(_SELECT.where(ah.c.uuid == uuid)).first()
    if row is None:
        raise exceptions.AttachHandleNotFound(uuid=uuid)
    return _handle(row)
