"""/v2/devices: list, show, enable, disable."""

from __future__ import annotations

from exosuit.api import pagination, wsgi
from exosuit.api.policies import devices as policies
from exosuit.db import devices as db

SORT_KEYS = set(db.SORT_COLUMNS)


def _serialize(req: wsgi.Request, device: dict) -> dict:
    body = {
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
    return body


def list_devices(req: wsgi.Request):
    """200 ``{"devices": [...]}``; exact-match filters type, vendor, hostname (and
    status from 2.3)."""
    req.app.authorize(req, policies.GET_ALL)
    names = db.FILTERS if req.version.matches((2, 3)) else db.FILTERS[:3]
    filters = {name: req.GET[name] for name in names if name in req.GET}
    page = pagination.page_from_request(req, SORT_KEYS)
    rows = req.app.db.read(db.list_devices, filters=filters, page=page)
    body: dict = {}
    rows = pagination.next_link(req, page, rows, body)
    body["devices"] = [_serialize(req, d) for d in rows]
    return wsgi.json_response(200, body)


def get_device(req: wsgi.Request):
    req.app.authorize(req, policies.GET_ONE)
    device = req.app.db.read(db.get, req.arg("uuid"))
    return wsgi.json_response(200, _serialize(req, device))


def _set_status(req: wsgi.Request, rule: str, status: str):
    req.app.authorize(req, rule)
    req.app.db.write(db.set_status, req.arg("uuid"), status)
    return wsgi.json_response(200)


def enable_device(req: wsgi.Request):
    """200, no body: the device takes binds again."""
    return _set_status(req, policies.ENABLE, "enabled")


def disable_device(req: wsgi.Request):
    """200, no body: the device is in maintenance and takes no new binds."""
    return _set_status(req, policies.DISABLE, "maintaining")
