"""/agent/v1/hosts/{hostname}/accelerator_requests/{uuid}: a host's agent reports the
work a bind waits for (doc/agent-api.md, doc/arq-states.md)."""

from __future__ import annotations

from exosuit.api import wsgi
from exosuit.api.describe import NSTR, STR, Handler, Operation, Schema, obj, ref
from exosuit.api.policies import agent as policies
from exosuit.api.schemas import agent_arqs as schema
from exosuit.db import arqs as db


def put_host_work(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"uuid", "hostname", "state"}``.

    ``{"result": "done"}``: the work is done, the ARQ is Bound. ``{"result":
    "failed", "reason": …}``: it is BindFailed and its attach handle free. Either
    way Nova gets its event. The same report again changes nothing. 404 if the ARQ
    is not bound to this host; 409 if it waits for nothing (its bind timed out or
    was unbound: undo the work).
    """
    req.app.authorize(req, policies.REPORT)
    body = wsgi.extract_json(req, schema.PUT_HOST_WORK_V1)
    error = None
    if body["result"] == "failed":
        error = body.get("reason") or "the host could not do the work this bind needs"
    arq = req.app.db.write(
        db.finish_host_work, req.arg("hostname"), req.arg("uuid").lower(), error=error
    )
    return wsgi.json_response(
        200, {"uuid": arq["uuid"], "hostname": arq["hostname"], "state": arq["state"]}
    )


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "HostWork": obj({"uuid": STR, "hostname": NSTR, "state": STR}),
}


OPERATIONS: dict[Handler, Operation] = {
    put_host_work: Operation(
        "A host reports the work a bind waits for",
        errors=(404, 409),
        body=schema.PUT_HOST_WORK_V1,
        returns=ref("HostWork"),
    ),
}
