"""/v2/devices: list, show, enable, disable; /v2/device_activations (2.7): mark devices
ready or inactive; drain and undrain, health (2.9); delete a lost device,
/v2/device_labels (2.10) (doc/devices.md)."""

from __future__ import annotations

import dataclasses

from exosuit import exceptions
from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    BOOL,
    LINKS,
    NINT,
    NSTR,
    STR,
    TIME,
    Handler,
    Operation,
    Schema,
    list_of,
    obj,
    paged,
    query,
    ref,
)
from exosuit.api.policies import devices as policies
from exosuit.api.schemas import devices as schema
from exosuit.db import activations
from exosuit.db import desired_state as desired_db
from exosuit.db import devices as db
from exosuit.db import drain as drain_db
from exosuit.db import health as health_db
from exosuit.schemas import JSONObject
from exosuit.schemas import labels as labels_rules

SORT_KEYS = set(db.SORT_COLUMNS)


def _serialize(req: wsgi.Request, device: db.DeviceRow) -> JSONObject:
    body: JSONObject = {
        "uuid": device["uuid"],
        "type": device["type"],
        "vendor": device["vendor"],
        "model": device["model"],
        "std_board_info": device["std_board_info"],
        "vendor_board_info": device["vendor_board_info"],
        "hostname": device["hostname"],
        "created_at": wsgi.format_time(device["created_at"]),
        "updated_at": wsgi.format_time(device["updated_at"]),
        "links": [req.link("devices", device["uuid"])],
    }
    if req.version.matches((2, 3)):
        body["status"] = device["status"]
    if req.version.matches((2, 4)):
        body["presence"] = device["presence"]
        body["presence_reason"] = device["presence_reason"]
        body["driver_name"] = device["driver_name"]
        body["pci_address"] = device["pci_address"]
        body["numa_node"] = device["numa_node"]
        body["firmware_version"] = device["firmware_version"]
    if req.version.matches((2, 6)):
        # Why Exosuit disabled it (a program that could not restore the previous image).
        body["status_reason"] = device["status_reason"]
    if req.version.matches((2, 7)):
        body["activation"] = device["activation"]
        body["activation_reason"] = device["activation_reason"]
        body["services"] = device["services"]
        body["usage"] = device["usage"]
        body["usage_seen_at"] = wsgi.format_time(device["usage_seen_at"])
    if req.version.matches((2, 9)):
        # Drain: draining while held, drained once nothing holds it (doc/devices.md).
        body["maintenance"] = device["maintenance"]
        body["holders"] = device["holders"]
        # Health: offered, or held back until it recovers or is cleared (doc/devices.md).
        body["health"] = _health(req, health_db.view(device, _recover_after(req)))
    if req.version.matches((2, 10)):
        # An operator's labels (doc/devices.md, "Labels"): {} when none.
        body["labels"] = labels_rules.decode(device["labels"])
        # Where it sits: its root port and IOMMU group, null where the host has none.
        body["pcie_root"] = device["pcie_root"]
        body["iommu_group"] = device["iommu_group"]
    return body


def _recover_after(req: wsgi.Request) -> float:
    return float(req.app.conf.health.recover_after)


def _health(req: wsgi.Request, health: health_db.HealthView) -> JSONObject:
    return {
        **health,
        "since": wsgi.format_time(health["since"]),
        "offered_at": wsgi.format_time(health["offered_at"]),
    }


def _filter_names(req: wsgi.Request) -> tuple[str, ...]:
    """The exact-match filters of this microversion: status from 2.3, activation 2.7."""
    if req.version.matches((2, 7)):
        return db.FILTERS
    return db.FILTERS[:4] if req.version.matches((2, 3)) else db.FILTERS[:3]


def label_filter(req: wsgi.Request) -> dict[str, str]:
    """The ``label=key=value`` filters of a list (2.10; repeatable: every one must
    match), 400 ``exosuit.query.label`` for one that is not a label."""
    if not req.version.matches((2, 10)):
        return {}
    wanted: dict[str, str] = {}
    for text in req.GET.getall("label"):
        try:
            key, value = labels_rules.parse_selector(text)
        except labels_rules.LabelInvalid as error:
            raise wsgi.ApiError(400, f"label: {error}.", "exosuit.query.label") from None
        if wanted.get(key, value) != value:
            raise wsgi.ApiError(400, f"label: {key} asked twice.", "exosuit.query.label")
        wanted[key] = value
    return wanted


def list_devices(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"devices": [...]}``; exact-match filters type, vendor, hostname (and
    status from 2.3, activation from 2.7, label from 2.10; services and usage shown from
    2.7)."""
    req.app.authorize(req, policies.GET_ALL)
    filters = {n: v for n in _filter_names(req) if (v := pagination.text_param(req, n)) is not None}
    page = pagination.page_from_request(req, SORT_KEYS)
    details, maintenance = req.version.matches((2, 7)), req.version.matches((2, 9))
    rows = req.app.db.read(
        db.list_devices,
        filters=filters,
        labels=label_filter(req),
        page=page,
        details=details,
        maintenance=maintenance,
    )
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body)
    body["devices"] = [_serialize(req, d) for d in rows]
    return wsgi.json_response(200, body)


def get_device(req: wsgi.Request) -> wsgi.Response:
    req.app.authorize(req, policies.GET_ONE)
    device = req.app.db.read(
        db.get,
        req.arg("uuid"),
        details=req.version.matches((2, 7)),
        maintenance=req.version.matches((2, 9)),
    )
    return wsgi.json_response(200, _serialize(req, device))


def _set_status(req: wsgi.Request, rule: str, status: str) -> wsgi.Response:
    req.app.authorize(req, rule)
    req.app.db.write(db.set_status, req.arg("uuid"), status)
    return wsgi.json_response(200)


def enable_device(req: wsgi.Request) -> wsgi.Response:
    """200, no body: the device takes binds again."""
    return _set_status(req, policies.ENABLE, "enabled")


def disable_device(req: wsgi.Request) -> wsgi.Response:
    """200, no body: the device is in maintenance and takes no new binds."""
    return _set_status(req, policies.DISABLE, "maintaining")


def _drain(req: wsgi.Request, drain: bool) -> wsgi.Response:
    req.app.authorize(req, policies.DRAIN if drain else policies.UNDRAIN)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):  # no device has such an id
        raise exceptions.DeviceNotFound(uuid=uuid)
    return wsgi.json_response(200, req.app.db.write(drain_db.drain_device, uuid, drain=drain))


def drain_device(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"uuid", "hostname", "status", "maintenance", "holders"}`` (2.9): the device
    takes no new workload (status ``maintaining``, reserved in Placement); what holds it
    keeps it. ``maintenance``: ``draining`` while ``holders`` is not empty, ``drained``
    once it is. Idempotent; 404 for a device nobody has."""
    return _drain(req, True)


def undrain_device(req: wsgi.Request) -> wsgi.Response:
    """200 as drain (2.9): the device is enabled again (and the reason Exosuit gave, if
    it disabled the device itself, cleared). Idempotent."""
    return _drain(req, False)


def set_device_health(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"uuid", "hostname", "state", "reason", "since", "offered", "held_by",
    "offered_at", "holders"}`` (2.9): ``{"clear": true}`` offers a device held back as
    unhealthy again now; ``{"hold": true, "reason": …}`` holds a device back by hand
    until a clear (Placement reserves it, binds and claims refuse it; what holds it keeps
    it). Idempotent; 404 for a device nobody has, 400 for another body."""
    req.app.authorize(req, policies.HEALTH)
    body = wsgi.extract_json(req, schema.POST_DEVICE_HEALTH_V2_9)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):  # no device has such an id
        raise exceptions.DeviceNotFound(uuid=uuid)
    found = req.app.db.write(
        health_db.set_health,
        uuid,
        clear=bool(body.get("clear")),
        hold=bool(body.get("hold")),
        reason=body.get("reason"),
        recover_after=_recover_after(req),
    )
    return wsgi.json_response(200, _health(req, found))


def selection(body: JSONObject) -> tuple[list[str] | None, dict[str, str]]:
    """(uuids, filters) of a POST /v2/device_activations body: the devices named, or those
    matching hostname, type, driver. 400 for both at once, or neither (a request for
    every device of the fleet names it by its hosts or types)."""
    filters = {k: body[k] for k in activations.FILTERS if k in body}
    uuids = body.get("uuids")
    if (uuids is None) == (not filters):
        raise wsgi.ApiError(
            400,
            "Name the devices by uuids, or select them by hostname, type and/or driver (not both).",
            "exosuit.device_activation.selection",
        )
    return uuids, filters


def activate_devices(req: wsgi.Request) -> wsgi.Response:
    """202 ``{"state", "devices": [{"uuid", "hostname", "activation", "outcome",
    "reason"}]}`` (2.7): mark devices ``ready`` (their agent then runs their driver's
    install step) or ``inactive``, by ``uuids`` or by ``hostname``/``type``/``driver``.
    Each device's outcome is changed, unchanged (there already or on its way) or refused
    (inactive while an attach handle is held: the reason names the holders). 404 for a
    uuid that names no device, 409 ``exosuit.device.in_use`` when every device asked is
    refused; nothing changes then."""
    req.app.authorize(req, policies.ACTIVATE)
    body = wsgi.extract_json(req, schema.POST_DEVICE_ACTIVATIONS_V2_7)
    uuids, filters = selection(body)
    outcomes = req.app.db.write(activations.change, body["state"], uuids=uuids, filters=filters)
    devices = [dataclasses.asdict(o) for o in outcomes]
    return wsgi.json_response(202, {"state": body["state"], "devices": devices})


def delete_device(req: wsgi.Request) -> wsgi.Response:
    """204 (2.10): a lost device (gone from its host's report while held) that nothing
    holds any more is deleted with its deployables, attach handles and services; its
    providers leave Placement. 409 ``exosuit.device.not_lost`` for a device its host
    still reports (present, or missing within the removal grace), 409
    ``exosuit.device.in_use`` naming the ARQs that hold it, 404 for none."""
    req.app.authorize(req, policies.DELETE)
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):  # no device has such an id
        raise exceptions.DeviceNotFound(uuid=uuid)
    req.app.db.write(db.delete_lost, uuid)
    return wsgi.json_response(204)


def label_devices(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"devices": [{"uuid", "hostname", "labels", "outcome"}]}`` (2.10): the labels
    of ``set`` set and the keys of ``unset`` removed on every device of ``uuids``, all or
    none; each device's outcome is changed or unchanged. 400
    ``exosuit.device.labels_invalid`` for a key or value the rules refuse (or more than
    16 labels on a device), 404 naming each uuid that names no device; nothing changes
    then."""
    req.app.authorize(req, policies.LABEL)
    body = wsgi.extract_json(req, schema.POST_DEVICE_LABELS_V2_10)
    outcomes = req.app.db.write(
        db.set_labels, body["uuids"], set_=body.get("set", {}), unset=body.get("unset", [])
    )
    return wsgi.json_response(200, {"devices": outcomes})


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Device": obj(
        {
            "uuid": STR,
            "type": STR,
            "vendor": STR,
            "model": STR,
            "std_board_info": NSTR,
            "vendor_board_info": NSTR,
            "hostname": STR,
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        },
        {
            "status": {"description": "from 2.3", **STR},
            "presence": {"description": "from 2.4", **STR},
            "presence_reason": NSTR,
            "driver_name": NSTR,
            "pci_address": NSTR,
            "numa_node": NINT,
            "firmware_version": NSTR,
            "status_reason": {"description": "from 2.6", **NSTR},
            "activation": {"description": "from 2.7", "enum": list(desired_db.STATES)},
            "activation_reason": NSTR,
            "services": {"type": "array", "items": ref("DeviceService")},
            "usage": {
                "type": ["object", "null"],
                "additionalProperties": {"type": "number"},
                "description": "figure → value, as the host's last kept report had it",
            },
            "usage_seen_at": TIME,
            "maintenance": {"description": "from 2.9", "enum": ["draining", "drained", None]},
            "holders": {"type": "array", "items": ref("Holder")},
            "health": {**ref("DeviceHealthState"), "description": "from 2.9"},
            "labels": {
                "type": "object",
                "additionalProperties": STR,
                "description": "from 2.10: an operator's labels, key → value",
            },
            "pcie_root": {
                "description": "from 2.10: the PCI address of its PCI Express root port "
                "(its own on the root complex)",
                **NSTR,
            },
            "iommu_group": {"description": "from 2.10: its IOMMU group", **NINT},
        },
    ),
    "DeviceHealthState": obj(
        {
            "state": {"enum": ["ok", "warning", "unhealthy"]},
            "reason": NSTR,
            "since": TIME,
            "offered": {**BOOL, "description": "False while held back from every offer"},
            "held_by": {"enum": ["agent", "operator", None]},
            "offered_at": {
                **TIME,
                "description": "held back by its agent and healthy again: when it is offered "
                "again at the earliest",
            },
        }
    ),
    "DeviceHealth": obj(
        {
            "uuid": STR,
            "hostname": STR,
            "state": {"enum": ["ok", "warning", "unhealthy"]},
            "reason": NSTR,
            "since": TIME,
            "offered": BOOL,
            "held_by": {"enum": ["agent", "operator", None]},
            "offered_at": TIME,
            "holders": {"type": "array", "items": ref("Holder")},
        }
    ),
    "Holder": obj(
        {
            "attach_handle_uuid": STR,
            "arq_uuid": NSTR,
            "arq_state": NSTR,
            "instance_uuid": NSTR,
            "project_id": NSTR,
            "claim_uuid": NSTR,
        },
        {"device_uuid": {"description": "a host's holders: the device held", **STR}},
    ),
    "DeviceDrain": obj(
        {
            "uuid": STR,
            "hostname": STR,
            "status": {"enum": ["enabled", "maintaining"]},
            "maintenance": {"enum": ["draining", "drained", None]},
            "holders": {"type": "array", "items": ref("Holder")},
        }
    ),
    "LabelOutcomes": obj(
        {
            "devices": {
                "type": "array",
                "items": obj(
                    {
                        "uuid": STR,
                        "hostname": STR,
                        "labels": {"type": "object", "additionalProperties": STR},
                        "outcome": {"enum": ["changed", "unchanged"]},
                    }
                ),
            },
        }
    ),
    "DeviceService": obj(
        {
            "kind": STR,
            "name": STR,
            "enabled": BOOL,
            "details": {"type": "object", "additionalProperties": STR},
        }
    ),
    "ActivationOutcomes": obj(
        {
            "state": {"enum": ["ready", "inactive"]},
            "devices": {
                "type": "array",
                "items": obj(
                    {
                        "uuid": STR,
                        "hostname": STR,
                        "activation": STR,
                        "outcome": {"enum": ["changed", "unchanged", "refused"]},
                        "reason": NSTR,
                    }
                ),
            },
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_devices: Operation(
        "List devices",
        query=(
            *(
                query(name, STR, "Exact match" + (" (from 2.3)." if name == "status" else "."))
                for name in db.FILTERS
            ),
            query(
                "label",
                STR,
                "key=value: only devices with this label (from 2.10; repeatable, every "
                "one must match).",
            ),
            *paged(SORT_KEYS),
        ),
        returns=list_of("devices", "Device"),
    ),
    get_device: Operation("Show a device", errors=(404,), returns=ref("Device")),
    delete_device: Operation(
        "Delete a lost device that nothing holds (2.10)", ok=(204,), errors=(404, 409)
    ),
    label_devices: Operation(
        "Set or remove labels on devices (2.10)",
        errors=(400, 404),
        body=schema.POST_DEVICE_LABELS_V2_10,
        returns=ref("LabelOutcomes"),
    ),
    activate_devices: Operation(
        "Mark devices ready or inactive",
        ok=(202,),
        errors=(404, 409),
        body=schema.POST_DEVICE_ACTIVATIONS_V2_7,
        returns=ref("ActivationOutcomes"),
    ),
    enable_device: Operation("Enable a device", errors=(404,)),
    disable_device: Operation("Disable a device (maintenance)", errors=(404,)),
    drain_device: Operation(
        "Drain a device (2.9): no new workload; what holds it keeps it",
        errors=(404,),
        returns=ref("DeviceDrain"),
    ),
    undrain_device: Operation("Undrain a device (2.9)", errors=(404,), returns=ref("DeviceDrain")),
    set_device_health: Operation(
        "Clear a device held back as unhealthy, or hold one back by hand (2.9)",
        errors=(400, 404),
        body=schema.POST_DEVICE_HEALTH_V2_9,
        returns=ref("DeviceHealth"),
    ),
}
