"""/v2/permissions (microversion 2.11): who the caller is, and what the API lets it do.

Every policy rule of the API (the per-resource rules of exosuit/api/policies, by
name) → whether the caller passes it, judged by oslo.policy as a request would be, for
an object of the caller's own project: a rule owned per project (deleting a claim)
says what the caller may do to its own project's objects. The console draws a button
only for a rule the caller passes; the API still decides at every call.
"""

from __future__ import annotations

from exosuit.api import policies as registry
from exosuit.api import wsgi
from exosuit.api.describe import BOOL, NSTR, STR, Handler, Operation, Schema, obj, ref
from exosuit.api.policies import permissions as policies
from exosuit.schemas import JSONObject


def get_permissions(req: wsgi.Request) -> wsgi.Response:
    """200 with the caller's user, project and roles, and ``permissions``: every rule
    name → true or false. Any project-scoped caller may read its own."""
    req.app.authorize(req, policies.GET)
    context = req.context
    body: JSONObject = {
        "user_id": context.user_id,
        "user_name": context.user_name,
        "project_id": context.project_id,
        "project_name": context.project_name,
        "roles": sorted(context.roles),
        "permissions": {rule: req.app.allowed(req, rule) for rule in registry.permission_rules()},
    }
    return wsgi.json_response(200, body)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Permissions": obj(
        {
            "user_id": NSTR,
            "user_name": NSTR,
            "project_id": NSTR,
            "project_name": NSTR,
            "roles": {"type": "array", "items": STR},
            "permissions": {
                "type": "object",
                "description": "Every policy rule of the API → whether the caller passes it "
                "for an object of its own project.",
                "additionalProperties": BOOL,
            },
        }
    ),
}

OPERATIONS: dict[Handler, Operation] = {
    get_permissions: Operation("The caller's identity and permissions", returns=ref("Permissions")),
}
