"""/v2/drivers (microversion 2.7): each host's driver plug-ins as managed objects; install,
update and uninstall them on hosts (doc/devices.md, "Drivers as managed objects")."""

from __future__ import annotations

import re

from exosuit.api import pagination, wsgi
from exosuit.api.describe import (
    BOOL,
    INT,
    NBOOL,
    NINT,
    NSTR,
    STR,
    TEXT,
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
from exosuit.api.policies import drivers as policies
from exosuit.api.schemas import drivers as schema
from exosuit.db import drivers as db
from exosuit.schemas import JSONObject, names

# An entry point name of the exosuit.drivers group.
NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
PAGING = pagination.Paging(
    sort_keys=frozenset(db.SORT_COLUMNS),
    default_key="hostname",
    default_dir="asc",
    marker_field="id",
    marker_pattern=re.compile(r"[0-9]{1,9}"),  # within the integer column
    marker_kind="a driver row id",
)


def _serialize(driver: db.DriverRow) -> JSONObject:
    return {
        "id": driver["id"],
        "hostname": driver["hostname"],
        "name": driver["name"],
        "version": driver["version"],
        "enabled": driver["enabled"],
        "config_digest": driver["config_digest"],
        "found": driver["found"],
        "error": driver["error"],
        "reported_at": wsgi.format_time(driver["reported_at"]),
        "desired": driver["desired"],
        "observed": driver["observed"],
    }


def list_drivers(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"drivers": [...]}``: per host and driver, what the agent reported (version,
    enabled, config_digest, found, error), what was asked (``desired``: enabled, config,
    generation, scope host or fleet) and whether the agent applied it (``observed``);
    the row with hostname null is what was asked of every host. Filters hostname,
    name."""
    req.app.authorize(req, policies.GET_ALL)
    names = ("hostname", "name")
    filters = {n: v for n in names if (v := pagination.text_param(req, n)) is not None}
    page = pagination.page_from_request(req, PAGING)
    rows = req.app.db.read(db.list_drivers, filters=filters, page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body, PAGING)
    body["drivers"] = [_serialize(d) for d in rows]
    return wsgi.json_response(200, body)


def _change(req: wsgi.Request, action: str, rule: str, body_schema: JSONObject) -> wsgi.Response:
    """202 ``{"driver", "action", "all_hosts", "hosts": [{"hostname", "generation"}],
    "deactivated": [device uuids]}``: the wish is each host's desired state from the
    generation given (``GET /v2/drivers?name=`` shows when each applied it)."""
    req.app.authorize(req, rule)
    name = req.arg("name")
    if not names.is_name(name):
        raise wsgi.ApiError(
            400, f"The driver name {name!r} is not a name: {names.RULE}.", names.CODE
        )
    if not NAME.fullmatch(name):
        raise wsgi.ApiError(
            400,
            f"{name!r} is not a driver name (letters, digits, '_', '.', '-'; at most 100).",
            "exosuit.driver.name",
        )
    body = wsgi.extract_json(req, body_schema)
    result = req.app.db.write(
        db.change, name, action, hostnames=body.get("hostnames"), config=body.get("config")
    )
    return wsgi.json_response(202, result)


def install_driver(req: wsgi.Request) -> wsgi.Response:
    """202: enable the driver on ``hostnames`` (absent: every host, and those that report
    later), with ``config`` overriding the agents' files. 404 for a host never seen."""
    return _change(req, "install", policies.INSTALL, schema.POST_DRIVER_V2_7)


def update_driver(req: wsgi.Request) -> wsgi.Response:
    """202: change the driver's ``config`` on ``hostnames`` (absent: every host)."""
    return _change(req, "update", policies.UPDATE, schema.POST_DRIVER_V2_7)


def uninstall_driver(req: wsgi.Request) -> wsgi.Response:
    """202: disable the driver on ``hostnames`` (absent: every host); its free devices
    there become inactive at once. 409 ``exosuit.driver.in_use`` while an attach handle
    of one of them is held (the holders named): nothing changes then."""
    return _change(req, "uninstall", policies.UNINSTALL, schema.POST_DRIVER_UNINSTALL_V2_7)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Driver": obj(
        {
            "id": INT,
            "hostname": {"type": ["string", "null"], "description": "null: every host"},
            "name": STR,
            "version": NSTR,
            "enabled": NBOOL,
            "config_digest": NSTR,
            "found": NINT,
            "error": NSTR,
            "reported_at": TIME,
            "desired": {"type": ["object", "null"]},
            "observed": NBOOL,
        }
    ),
    "DriverChange": obj(
        {
            "driver": STR,
            "action": {"enum": ["install", "update", "uninstall"]},
            "all_hosts": BOOL,
            "hosts": {
                "type": "array",
                "items": obj({"hostname": STR, "generation": INT}),
            },
            "deactivated": {"type": "array", "items": STR},
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    list_drivers: Operation(
        "List each host's drivers: reported, asked, observed",
        query=(
            query("hostname", TEXT, "Only this host's."),
            query("name", TEXT, "Only this driver."),
            *paged(PAGING),
        ),
        returns=list_of("drivers", "Driver"),
    ),
    install_driver: Operation(
        "Enable a driver on hosts",
        ok=(202,),
        errors=(404,),
        body=schema.POST_DRIVER_V2_7,
        returns=ref("DriverChange"),
    ),
    update_driver: Operation(
        "Change a driver's options on hosts",
        ok=(202,),
        errors=(404,),
        body=schema.POST_DRIVER_V2_7,
        returns=ref("DriverChange"),
    ),
    uninstall_driver: Operation(
        "Disable a driver on hosts (its free devices become inactive)",
        ok=(202,),
        errors=(404, 409),
        body=schema.POST_DRIVER_UNINSTALL_V2_7,
        returns=ref("DriverChange"),
    ),
}
