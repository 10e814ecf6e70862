"""/v2/images (microversion 2.6): Exosuit's image catalogue (doc/programming.md).

Create an image, then upload its data once (streamed to ``[images] data_dir``, hashed
and verified on the way: exosuit/glance/catalogue.py); list, show, download, delete;
share a ``shared`` image with other projects. Reads are authorized for the caller's
project and show what it sees (exosuit/db/images.py); changes are authorized a
second time with the image's owner as the target.
"""

from __future__ import annotations

import re

from exosuit import exceptions
from exosuit.api import pagination, streaming, wsgi
from exosuit.api.describe import (
    BOOL,
    LINKS,
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
from exosuit.api.policies import images as policies
from exosuit.api.schemas import images as schema
from exosuit.db import images as db
from exosuit.glance import catalogue
from exosuit.images import verify
from exosuit.schemas import JSONObject

SORT_KEYS = set(db.SORT_COLUMNS)
# What a project id can be (Keystone's are 32 hex digits; any other stays printable).
_PROJECT_ID = re.compile(r"[^\x00-\x1f\x7f]{1,255}")


def _serialize(req: wsgi.Request, image: db.ImageRow) -> JSONObject:
    return {
        "uuid": image["uuid"],
        "name": image["name"],
        "owner": image["owner"],
        "visibility": image["visibility"],
        "vendor": image["vendor"],
        "board": image["board"],
        "function_id": image["function_id"],
        "interface_id": image["interface_id"],
        "format": image["format"],
        "status": image["status"],
        "size": image["size"],
        "sha256": image["sha256"],
        "signed": image["signature"] is not None,
        "signature_key_id": image["signature_key_id"],
        "source": "exosuit",
        "created_at": wsgi.format_time(image["created_at"]),
        "updated_at": wsgi.format_time(image["updated_at"]),
        "links": [req.link("images", image["uuid"])],
    }


def _serialize_member(member: db.ImageMember) -> JSONObject:
    return {
        "image_uuid": member["image_uuid"],
        "project_id": member["project_id"],
        "created_at": wsgi.format_time(member["created_at"]),
    }


def _viewer(req: wsgi.Request) -> db.Viewer:
    return db.Viewer(req.context.project_id, req.context.is_admin_role)


def _image(req: wsgi.Request, rule: str) -> db.ImageRow:
    """The image of the path, if the caller may ``rule`` it: first for its own project
    (403), then seen (404), then with the image's owner as the target (403)."""
    req.app.authorize(req, rule)
    image = req.app.db.read(db.get, req.arg("uuid"), viewer=_viewer(req))
    owner = {"project_id": image["owner"], "user_id": req.context.user_id}
    req.app.authorize(req, rule, owner)
    return image


def _project_id(req: wsgi.Request) -> str:
    project_id = req.arg("project_id")
    if not _PROJECT_ID.fullmatch(project_id):
        raise wsgi.ApiError(400, f"Invalid project id {project_id!r}.", "exosuit.query.project_id")
    return project_id


def _signature_fields(req: wsgi.Request, body: JSONObject) -> JSONObject:
    """The signature columns of a new image; ImageSignatureInvalid (400) at once for a
    signature nothing could verify, or none where one is required."""
    given = body.get("signature")
    if given is None:
        if req.app.conf.images.require_signature:
            raise exceptions.ImageSignatureInvalid(
                uuid=body["name"], reason="is missing, and [images] require_signature is set"
            )
        return {}
    keys = catalogue.trusted_keys(req.app.conf)
    if given["key_id"] not in keys:
        trusted = ", ".join(keys) or "none"
        raise exceptions.ImageSignatureInvalid(
            uuid=body["name"],
            reason=f"names key {given['key_id']!r}, which is not trusted "
            f"([images] trusted_keys: {trusted})",
        )
    try:
        signature = verify.Signature.from_base64(
            given["key_id"], given["value"], given["algorithm"]
        )
    except verify.SignatureInvalid as error:
        raise exceptions.ImageSignatureInvalid(uuid=body["name"], reason=str(error)) from None
    return {
        "signature": signature.base64,
        "signature_key_id": signature.key_id,
        "signature_algorithm": signature.algorithm,
    }


def create_image(req: wsgi.Request) -> wsgi.Response:
    """201 IMAGE (``status`` queued: no data yet), owned by the caller's project, with
    ``Location``. 400 for a signature that names an untrusted key, or none where one
    is required."""
    req.app.authorize(req, policies.CREATE)
    body = wsgi.extract_json(req, schema.POST_IMAGE_V2_6)
    fields = {k: v for k, v in body.items() if k != "signature"}
    fields.update(_signature_fields(req, body))
    image = req.app.db.write(db.create, owner=req.context.project_id, **fields)
    location = req.link("images", image["uuid"])["href"]
    return wsgi.json_response(201, _serialize(req, image), headers=[("Location", location)])


def upload_image(req: wsgi.Request) -> wsgi.Response:
    """204: the body (any content type, streamed) is the image's data; it is active.

    400 when the data is empty, cut short, not the ``sha256`` given at creation, or
    its signature does not verify; 409 when the image has its data already; 413
    above ``[images] max_size`` (the Content-Length first, then the bytes received).
    """
    image = _image(req, policies.UPLOAD)
    catalogue.receive(req.app.conf, req.app.db, image, req.body_file, req.content_length)
    return wsgi.json_response(204)


def download_image(req: wsgi.Request) -> wsgi.Response:
    """200 the data (``Range`` gives 206), ``ETag: "<sha256>"``; 409 without data."""
    req.app.authorize(req, policies.DOWNLOAD)
    image = req.app.db.read(db.get, req.arg("uuid"), viewer=_viewer(req))
    return streaming.file_response(*catalogue.open_data(req.app.conf, image))


def list_images(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"images": [...]}``: those the caller sees, newest first by default;
    filters ``visibility``, ``name``, ``vendor``, ``function_id``, ``format``,
    ``status``; paging as 2.4 (``next`` while more remain)."""
    req.app.authorize(req, policies.GET_ALL)
    filters = {f: v for f in db.FILTERS if (v := pagination.text_param(req, f)) is not None}
    if filters.get("visibility", "private") not in db.VISIBILITIES:
        raise wsgi.ApiError(
            400,
            f"visibility must be one of {', '.join(db.VISIBILITIES)}, "
            f"not {filters['visibility']!r}.",
            "exosuit.query.visibility",
        )
    page = pagination.page_from_request(req, SORT_KEYS)
    rows = req.app.db.read(db.list_images, viewer=_viewer(req), filters=filters, page=page)
    body: JSONObject = {}
    rows = pagination.next_link(req, page, rows, body)
    body["images"] = [_serialize(req, image) for image in rows]
    return wsgi.json_response(200, body)


def get_image(req: wsgi.Request) -> wsgi.Response:
    """200 IMAGE; 404 ``exosuit.image.not_found`` when absent or not visible."""
    req.app.authorize(req, policies.GET_ONE)
    image = req.app.db.read(db.get, req.arg("uuid"), viewer=_viewer(req))
    return wsgi.json_response(200, _serialize(req, image))


def delete_image(req: wsgi.Request) -> wsgi.Response:
    """204, the image and its data gone; 409 ``exosuit.image.in_use`` while a program
    that has not ended loads (or would restore) it."""
    image = _image(req, policies.DELETE)
    req.app.db.write(db.delete, image["uuid"], viewer=_viewer(req))
    catalogue.remove(req.app.conf, image["uuid"])
    return wsgi.json_response(204)


def list_members(req: wsgi.Request) -> wsgi.Response:
    """200 ``{"members": [{"image_uuid", "project_id", "created_at"}…]}``."""
    image = _image(req, policies.MEMBERS)
    members = req.app.db.read(db.list_members, image["uuid"], viewer=_viewer(req))
    return wsgi.json_response(200, {"members": [_serialize_member(m) for m in members]})


def add_member(req: wsgi.Request) -> wsgi.Response:
    """200 the membership (the same again: idempotent); 400 unless the image is shared."""
    image = _image(req, policies.MEMBERS)
    project_id = _project_id(req)
    member = req.app.db.write(db.add_member, image["uuid"], project_id, viewer=_viewer(req))
    return wsgi.json_response(200, _serialize_member(member))


def remove_member(req: wsgi.Request) -> wsgi.Response:
    """204; 404 when the project is no member."""
    image = _image(req, policies.MEMBERS)
    project_id = _project_id(req)
    req.app.db.write(db.remove_member, image["uuid"], project_id, viewer=_viewer(req))
    return wsgi.json_response(204)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {
    "Image": obj(
        {
            "uuid": STR,
            "name": STR,
            "owner": NSTR,
            "visibility": {"enum": list(db.VISIBILITIES)},
            "vendor": NSTR,
            "board": NSTR,
            "function_id": NSTR,
            "interface_id": NSTR,
            "format": STR,
            "status": STR,
            "size": NINT,
            "sha256": NSTR,
            "signed": BOOL,
            "signature_key_id": NSTR,
            "source": STR,
            "created_at": TIME,
            "updated_at": TIME,
            "links": LINKS,
        }
    ),
    "ImageMember": obj({"image_uuid": STR, "project_id": STR, "created_at": TIME}),
}


OPERATIONS: dict[Handler, Operation] = {
    list_images: Operation(
        "List the images the caller sees",
        query=(
            *(
                query(
                    name,
                    {"enum": list(db.VISIBILITIES)} if name == "visibility" else TEXT,
                    "Exact match.",
                )
                for name in db.FILTERS
            ),
            *paged(SORT_KEYS),
        ),
        returns=list_of("images", "Image"),
    ),
    create_image: Operation(
        "Create an image (queued: no data yet)",
        ok=(201,),
        body=schema.POST_IMAGE_V2_6,
        returns=ref("Image"),
    ),
    get_image: Operation("Show an image", errors=(404,), returns=ref("Image")),
    delete_image: Operation("Delete an image", ok=(204,), errors=(404, 409)),
    download_image: Operation(
        "Download an image's data",
        ok=(200, 206, 304),
        errors=(404, 409, 416),
        media="application/octet-stream",
    ),
    upload_image: Operation(
        "Upload an image's data (once)", ok=(204,), errors=(404, 409), raw_body=True
    ),
    list_members: Operation(
        "The projects a shared image is shared with",
        errors=(404,),
        returns=obj({"members": {"type": "array", "items": ref("ImageMember")}}),
    ),
    add_member: Operation(
        "Share an image with a project", errors=(404,), returns=ref("ImageMember")
    ),
    remove_member: Operation("Stop sharing an image", ok=(204,), errors=(404,)),
}
