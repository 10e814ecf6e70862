"""/dashboard: the operators' web dashboard, shipped inside the package (doc/dashboard.md).

The page is a shell of HTML, CSS and JavaScript with no build step; the data comes
from the API itself (the same policy applies), fetched by the page. The shell and
its files are public: they hold no data. ``POST /dashboard`` signs in with Keystone
(the only way to get a token without one, so it is public too).
"""

from __future__ import annotations

import functools
import mimetypes
from importlib import resources

import jinja2
import webob

from exosuit.api import wsgi
from exosuit.api.dashboard import keystone
from exosuit.api.describe import NSTR, STR, Handler, Operation, Schema, obj, ref

_PACKAGE = "exosuit.api.dashboard"

# NOTE: nothing inline: the page's script and styles are files, so the policy can
# forbid inline code and anything from another origin.
_SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]

_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
SIGN_IN_SCHEMA = {
    "type": "object",
    "properties": {
        "username": _NAME,
        "password": {"type": "string", "minLength": 1, "maxLength": 4096},
        "project_name": _NAME,
        "user_domain_name": _NAME,
        "project_domain_name": _NAME,
    },
    "required": ["username", "password", "project_name"],
    "additionalProperties": False,
}


@functools.cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader(_PACKAGE, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def _response(body: bytes, content_type: str, headers: wsgi.Headers = ()) -> webob.Response:
    return webob.Response(
        body=body,
        status=200,
        headerlist=[
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-cache"),
            *headers,
        ],
    )


def page(req: wsgi.Request) -> wsgi.Response:
    """200: the dashboard's page (public: it holds no data)."""
    # Every URL of the page is relative to the API's root, so the dashboard works
    # behind a proxy that mounts the API under a prefix; ``/dashboard/`` is one
    # level deeper than ``/dashboard``.
    root = "../" if req.path_info.endswith("/") else "./"
    html = _templates().get_template("index.html").render(root=root)
    return _response(html.encode(), "text/html; charset=utf-8", _SECURITY_HEADERS)


def static(req: wsgi.Request) -> wsgi.Response:
    """200: one of the dashboard's static files; 404 for anything else."""
    name = req.arg("name")
    files = resources.files(_PACKAGE).joinpath("static")
    if name.startswith(".") or not files.joinpath(name).is_file():
        raise wsgi.ApiError(
            404, f"The resource {req.path_info} could not be found.", "exosuit.not_found"
        )
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    if content_type in ("text/javascript", "application/javascript", "text/css"):
        content_type += "; charset=utf-8"
    return _response(files.joinpath(name).read_bytes(), content_type, _SECURITY_HEADERS[1:])


def sign_in(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"token", "expires_at", "user", "project", "roles"}``: a Keystone token for
    the user name, password and project of the body (public). 400 for a bad body, 409
    under noauth, 401 when Keystone refuses, 502 when Keystone cannot be asked."""
    data = wsgi.extract_json(req, SIGN_IN_SCHEMA)
    if req.app.conf.api.auth_strategy != "keystone":
        raise wsgi.ApiError(
            409,
            "This API runs without authentication ([api] auth_strategy = noauth): "
            "there is nothing to sign in to.",
            "exosuit.dashboard.noauth",
        )
    try:
        signed_in = keystone.sign_in(req.app.conf, **data)
    except keystone.SignInRefused as error:
        raise wsgi.ApiError(401, str(error), "exosuit.dashboard.sign_in_refused") from None
    except keystone.KeystoneUnavailable as error:
        raise wsgi.ApiError(502, str(error), "exosuit.dashboard.keystone_unavailable") from None
    body = {
        "token": signed_in.token,
        "expires_at": signed_in.expires_at,
        "user": signed_in.user,
        "project": signed_in.project,
        "roles": list(signed_in.roles),
    }
    return wsgi.json_response(200, body, [("Cache-Control", "no-store")])


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "SignedIn": obj(
        {
            "token": STR,
            "expires_at": NSTR,
            "user": {},
            "project": {},
            "roles": {"type": "array", "items": STR},
        }
    ),
}


OPERATIONS: dict[Handler, Operation] = {
    page: Operation("The dashboard's page", media="text/html"),
    static: Operation("A file of the dashboard", errors=(404,), media="*/*"),
    sign_in: Operation(
        "Sign in with Keystone (409 under noauth)",
        errors=(401, 409, 502),
        body=SIGN_IN_SCHEMA,
        returns=ref("SignedIn"),
    ),
}
