"""/agent/v1/hosts/{hostname}/activations/{device_uuid}: a host's agent reports the
outcome of a device's install or uninstall step (doc/devices.md)."""

from __future__ import annotations

from exosuit import exceptions
from exosuit.api import wsgi
from exosuit.api.describe import Handler, Operation, Schema, obj, ref
from exosuit.api.policies import agent as policies
from exosuit.api.schemas import agent_activations as schema
from exosuit.db import activations as db
from exosuit.db import desired_state as desired_db


def put_activation(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"activation": <the device's activation now>}``.

    ``{"action": "install" | "uninstall", "generation", "state": "done" | "failed",
    "reason"?}``: install done makes the device ready, anything else inactive (a failure
    with its reason). Idempotent: the same outcome again answers 200. 409
    ``exosuit.activation.superseded`` when the device is no longer asked that action at
    that generation (the operator changed it since: the agent drops the outcome); 404
    for a device not on this host.
    """
    req.app.authorize(req, policies.REPORT)
    body = wsgi.extract_json(req, schema.PUT_ACTIVATION_V1)
    uuid = req.arg("device_uuid")
    if not wsgi.is_uuid_like(uuid):  # no device has such an id
        raise exceptions.DeviceNotFound(uuid=uuid)
    activation = req.app.db.write(
        db.record_outcome,
        req.arg("hostname"),
        uuid.lower(),
        action=body["action"],
        generation=body["generation"],
        state=body["state"],
        reason=body.get("reason"),
    )
    return wsgi.json_response(200, {"activation": activation})


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Activation": obj({"activation": {"enum": list(desired_db.STATES)}}),
}


OPERATIONS: dict[Handler, Operation] = {
    put_activation: Operation(
        "A host reports a device's install or uninstall step",
        errors=(404, 409),
        body=schema.PUT_ACTIVATION_V1,
        returns=ref("Activation"),
    ),
}
