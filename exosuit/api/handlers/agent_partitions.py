"""/agent/v1/hosts/{hostname}/partitions/{device_uuid}: a host's agent reports how it
applied a device's partition layout (doc/devices.md, "Partitions")."""

from __future__ import annotations

from exosuit import exceptions
from exosuit.api import wsgi
from exosuit.api.describe import Handler, Operation, Schema, obj, ref
from exosuit.api.policies import agent as policies
from exosuit.api.schemas import partitions as schema
from exosuit.db import partitions as db


def put_partition(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"state": <the device's partition state now>}``.

    ``{"generation", "state": "applied" | "failed", "reason"?}``. Idempotent: the same
    outcome again answers 200. 409 ``exosuit.partition.superseded`` when the device's
    layout is no longer the one of that generation (the operator set another since: the
    agent drops the outcome); 404 for a device not on this host.
    """
    req.app.authorize(req, policies.REPORT)
    body = wsgi.extract_json(req, schema.PUT_PARTITION_OUTCOME_V1)
    uuid = req.arg("device_uuid")
    if not wsgi.is_uuid_like(uuid):  # no device has such an id
        raise exceptions.DeviceNotFound(uuid=uuid)
    state = req.app.db.write(
        db.record_outcome,
        req.arg("hostname"),
        uuid.lower(),
        generation=body["generation"],
        state=body["state"],
        reason=body.get("reason"),
    )
    return wsgi.json_response(200, {"state": state})


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "PartitionOutcome": obj({"state": {"enum": ["applying", "applied", "failed"]}}),
}


OPERATIONS: dict[Handler, Operation] = {
    put_partition: Operation(
        "A host reports how it applied a device's partition layout",
        errors=(404, 409),
        body=schema.PUT_PARTITION_OUTCOME_V1,
        returns=ref("PartitionOutcome"),
    ),
}
