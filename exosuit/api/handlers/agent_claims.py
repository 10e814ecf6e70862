"""/agent/v1/hosts/{hostname}/claims/{claim_uuid}: a host's agent reports the CDI spec
files of a container claim (doc/standalone.md, doc/agent-api.md)."""

from __future__ import annotations

from exosuit import exceptions
from exosuit.api import wsgi
from exosuit.api.describe import NSTR, STR, Handler, Operation, Schema, obj, ref
from exosuit.api.policies import agent as policies
from exosuit.api.schemas import claims as schema
from exosuit.db import claims as db


def put_claim(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"claim": <uuid>, "cdi": {"state", "reason"}}``.

    ``{"cdi": "written" | "failed", "reason"?, "devices"?: [CDI ids]}``: the agent wrote
    the claim's spec files (``devices``: the CDI ids they define, which must be the
    claim's) or could not (why). Idempotent. 404 ``exosuit.claim.not_found`` for a claim
    that is not a live container claim of this host (released: the agent removes its
    files); 400 for ``written`` naming other CDI ids than the claim's.
    """
    req.app.authorize(req, policies.REPORT)
    body = wsgi.extract_json(req, schema.PUT_AGENT_CLAIM_V1)
    uuid = req.arg("claim_uuid").lower()
    if not wsgi.is_uuid_like(uuid):  # no claim has such an id
        raise exceptions.ClaimNotFound(uuid=uuid)
    cdi = req.app.db.write(
        db.record_cdi,
        req.arg("hostname"),
        uuid,
        state=body["cdi"],
        reason=body.get("reason"),
        devices=body.get("devices") or [],
    )
    return wsgi.json_response(200, {"claim": uuid, "cdi": cdi})


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "ClaimCDI": obj(
        {
            "claim": STR,
            "cdi": obj({"state": {"enum": ["written", "failed"]}, "reason": NSTR}),
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    put_claim: Operation(
        "A host reports a claim's CDI spec files",
        errors=(404,),
        body=schema.PUT_AGENT_CLAIM_V1,
        returns=ref("ClaimCDI"),
    ),
}
