"""/v2/devices/{uuid}/partitions (2.9): a device's partition layout (doc/devices.md,
"Partitions")."""

from __future__ import annotations

from exosuit import exceptions
from exosuit.api import wsgi
from exosuit.api.describe import NSTR, STR, Handler, Operation, Schema, obj, ref
from exosuit.api.policies import partitions as policies
from exosuit.api.schemas import partitions as schema
from exosuit.db import partitions as db


def _uuid(req: wsgi.Request) -> str:
    uuid = req.arg("uuid")
    if not wsgi.is_uuid_like(uuid):  # no device has such an id
        raise exceptions.DeviceNotFound(uuid=uuid)
    return uuid.lower()


def get_partitions(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"device_uuid", "hostname", "layout", "state", "reason", "generation",
    "slices": [{"attach_handle_uuid", "attach_type", "type", "in_use"}]}``: the layout
    set (null: never set) and how the agent applied it (applying, applied, failed with
    its reason), and the slices that exist as the host last reported them. 404."""
    req.app.authorize(req, policies.GET)
    return wsgi.json_response(200, req.app.db.read(db.get, _uuid(req)))


def set_partitions(req: wsgi.Request) -> wsgi.Response:
    """202 as GET: the layout (``{"mdev": {type: count}}``, ``{"mig": {profile: count}}``
    or ``{"vfs": n}``, with ``"on_demand"``) is the device's desired state; its agent
    applies it and reports (state ``applying`` until then). Idempotent. 409
    ``exosuit.partition.in_use`` when it would remove a slice in use (nothing changes);
    400 for a malformed layout; 404."""
    req.app.authorize(req, policies.SET)
    layout = wsgi.extract_json(req, schema.PUT_PARTITIONS_V2_9)
    return wsgi.json_response(202, req.app.db.write(db.set_layout, _uuid(req), layout))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Partitions": obj(
        {
            "device_uuid": STR,
            "hostname": STR,
            "layout": {
                "type": ["object", "null"],
                "description": "the layout set (null: never set; the device is left as it is)",
            },
            "state": {"enum": ["applying", "applied", "failed", None]},
            "reason": NSTR,
            "generation": {"type": ["integer", "null"]},
            "slices": {"type": "array", "items": ref("Slice")},
        }
    ),
    "Slice": obj(
        {
            "attach_handle_uuid": STR,
            "attach_type": STR,
            "type": {"description": "mdev type, MIG profile, vf, or whole", **STR},
            "in_use": {"type": "boolean"},
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    get_partitions: Operation(
        "A device's partition layout and slices (2.9)", errors=(404,), returns=ref("Partitions")
    ),
    set_partitions: Operation(
        "Set a device's partition layout (2.9): its agent applies it",
        ok=(202,),
        errors=(404, 409),
        body=schema.PUT_PARTITIONS_V2_9,
        returns=ref("Partitions"),
    ),
}
