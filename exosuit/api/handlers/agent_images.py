"""/agent/v1/images/{image_uuid}/data: the bytes of an image, for the agents that program it
(doc/programming.md, "Agent protocol")."""

from __future__ import annotations

from exosuit.api import streaming, wsgi
from exosuit.api.describe import Handler, Operation, Schema
from exosuit.api.policies import agent as policies
from exosuit.glance import sources


def get_image_data(req: wsgi.Request) -> wsgi.Response:
    """200 the image's data, streamed, with ``ETag: "<sha256>"`` and ``Accept-Ranges:
    bytes``; ``Range: bytes=N-`` resumes (206 with ``Content-Range``; 416 past the end).

    A catalogue image comes from ``[images] data_dir``; a Glance image from the API's
    cache, downloaded and verified there first when it is not in it yet (as the
    service user of ``[glance]``, else with the agent's token). 404 when no source has
    it, 409 ``exosuit.image.not_active`` without data, 400 ``exosuit.image.invalid``
    when Glance's data is not what Glance says, 503 when Glance does not answer.
    """
    req.app.authorize(req, policies.IMAGE_DATA)
    stream, size, sha256 = sources.open_data(
        req.app.conf, req.app.db, req.arg("image_uuid"), token=req.context.auth_token
    )
    return streaming.file_response(stream, size, sha256)


# -- GET /openapi.json: the shapes of the answers, the operations (api/describe.py) -----

SHAPES: dict[str, Schema] = {}


OPERATIONS: dict[Handler, Operation] = {
    get_image_data: Operation(
        "An image's data, for the host that programs it",
        ok=(200, 206, 304),
        errors=(404, 409, 416, 502),
        media="application/octet-stream",
    ),
}
