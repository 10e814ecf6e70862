"""/agent/v1/hosts/{hostname}/programs/{uuid}: a host's agent reports a program's
progress (doc/programming.md, "Agent protocol")."""

from __future__ import annotations

from exosuit.api import programs, wsgi
from exosuit.api.describe import Handler, Operation, Schema, ref
from exosuit.api.policies import agent as policies
from exosuit.api.schemas import agent_programs as schema
from exosuit.db import arqs as db
from exosuit.db import programs as programs_db


def put_program(req: wsgi.Request) -> wsgi.Response:
    """200 PROGRAM.

    ``{"state": "fetching" | "programming" | "verifying" | "done" | "failed",
    "reason"?, "restored"?, "loaded"?: {"function_id", "interface_id"}}``. Idempotent;
    a state never goes back (an earlier one changes nothing). ``done`` loads the image
    on the deployable (a bind's ARQ is Bound), ``failed`` frees it (a bind's ARQ is
    BindFailed; ``restored`` false disables the device). 404 for a program not on this
    host; 409 ``exosuit.program.ended`` for one that already ended otherwise.
    """
    req.app.authorize(req, policies.REPORT)
    body = wsgi.extract_json(req, schema.PUT_PROGRAM_V1)
    loaded = body.get("loaded")
    report = programs_db.Report(
        state=body["state"],
        reason=body.get("reason"),
        restored=body.get("restored"),
        loaded=None if loaded is None else programs_db.Loaded(**loaded),
    )
    program = req.app.db.write(db.report_program, req.arg("hostname"), req.arg("uuid"), report)
    return wsgi.json_response(200, programs.serialize(program))


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {}


OPERATIONS: dict[Handler, Operation] = {
    put_program: Operation(
        "A host reports a program's progress",
        errors=(404, 409),
        body=schema.PUT_PROGRAM_V1,
        returns=ref("Program"),
    ),
}
