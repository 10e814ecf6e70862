"""The services devices offer (doc/devices.md, Services), across the fleet.

Rows are written by the inventory (exosuit/db/inventory.py: each changed report's
services, matched by kind and name so that a service that stays keeps its id).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import models
from exosuit.db.pagination import Page, paginate

__all__ = ["FILTERS", "SORT_COLUMNS", "DeviceService", "ServiceRow", "list_services", "of_devices"]

svc = models.device_services
dev = models.devices

SORT_COLUMNS = {"id": svc.c.id, "kind": svc.c.kind, "name": svc.c.name}
# Query filter → column (``enabled`` is a boolean, the others exact text).
FILTERS = {
    "hostname": dev.c.hostname,
    "type": dev.c.type,
    "kind": svc.c.kind,
    "name": svc.c.name,
    "enabled": svc.c.enabled,
}

_SELECT = sa.select(
    svc,
    dev.c.uuid.label("device_uuid"),
    dev.c.hostname,
    dev.c.type.label("device_type"),
    dev.c.driver_name,
    dev.c.activation,
).select_from(svc.join(dev, dev.c.id == svc.c.device_id))


class DeviceService(TypedDict):
    """A service of a device, as the device's own view shows it."""

    kind: str
    name: str
    enabled: bool
    details: dict[str, str]


class ServiceRow(TypedDict):
    """A service as /v2/services shows it: its row (``details`` read) and its device's."""

    id: int
    device_id: int
    kind: str
    name: str
    enabled: bool
    details: dict[str, str]
    device_uuid: str
    hostname: str
    device_type: str
    driver_name: str | None
    activation: str


def _service(row: sa.Row[Any]) -> ServiceRow:
    service = dict(row._mapping)
    service["details"] = json.loads(service["details"] or "{}")
    return cast(ServiceRow, service)  # _SELECT's columns, details read


def list_services(
    conn: Connection, *, filters: Mapping[str, str | bool], page: Page | None
) -> list[ServiceRow]:
    """A page of services with their device's uuid, host, type and driver (``page.marker``:
    the id of the last one seen), one more than ``page.limit`` when more remain."""
    stmt = _SELECT
    for key, value in filters.items():
        stmt = stmt.where(FILTERS[key] == value)
    if page is None:  # every list of 2.7 is paged; said rather than assumed
        stmt = stmt.order_by(svc.c.id)
    else:
        stmt = paginate(conn, stmt, svc, page, SORT_COLUMNS, marker_column=svc.c.id)
    return [_service(r) for r in conn.execute(stmt)]


def of_devices(conn: Connection, device_ids: Collection[int]) -> dict[int, list[DeviceService]]:
    """The services of each device (kind, name, enabled, details), by device id, in the
    order they were stored."""
    found: dict[int, list[DeviceService]] = {i: [] for i in device_ids}
    if not device_ids:
        return found
    for row in conn.execute(
        sa.select(svc).where(svc.c.device_id.in_(sorted(device_ids))).order_by(svc.c.id)
    ):
        found[row.device_id].append(
            {
                "kind": row.kind,
                "name": row.name,
                "enabled": row.enabled,
                "details": json.loads(row.details or "{}"),
            }
        )
    return found
