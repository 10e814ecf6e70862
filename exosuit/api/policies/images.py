"""Image catalogue rules (microversion 2.6). Reads are checked against the caller's
project (which images it sees is the catalogue's visibility); changes to an image
(upload, delete, members) against the image's owner, so only the owner's members
(or an admin) make them."""

from collections.abc import Sequence

from oslo_policy import policy

from exosuit.api.policies import base

PREFIX = "exosuit:image:%s"
GET_ALL = PREFIX % "get_all"
GET_ONE = PREFIX % "get_one"
CREATE = PREFIX % "create"
UPLOAD = PREFIX % "upload"
DOWNLOAD = PREFIX % "download"
DELETE = PREFIX % "delete"
MEMBERS = PREFIX % "members"

_PATH = "/v2/images"

_rules = [
    policy.DocumentedRuleDefault(
        GET_ALL,
        base.PROJECT_READER_OR_ADMIN,
        "List the images the project sees (its own, public ones, shared with it).",
        [{"path": _PATH, "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        GET_ONE,
        base.PROJECT_READER_OR_ADMIN,
        "Show an image the project sees.",
        [{"path": _PATH + "/{uuid}", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        CREATE,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Create an image (no data yet), owned by the caller's project.",
        [{"path": _PATH, "method": "POST"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        UPLOAD,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Upload an image's data (target: the image's owner).",
        [{"path": _PATH + "/{uuid}/file", "method": "PUT"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DOWNLOAD,
        base.PROJECT_READER_OR_ADMIN,
        "Download the data of an image the project sees.",
        [{"path": _PATH + "/{uuid}/file", "method": "GET"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        DELETE,
        base.PROJECT_MEMBER_OR_ADMIN,
        "Delete an image (target: the image's owner).",
        [{"path": _PATH + "/{uuid}", "method": "DELETE"}],
        scope_types=["project"],
    ),
    policy.DocumentedRuleDefault(
        MEMBERS,
        base.PROJECT_MEMBER_OR_ADMIN,
        "List, add and remove the projects a shared image is shared with (target: the "
        "image's owner).",
        [
            {"path": _PATH + "/{uuid}/members", "method": "GET"},
            {"path": _PATH + "/{uuid}/members/{project_id}", "method": "PUT"},
            {"path": _PATH + "/{uuid}/members/{project_id}", "method": "DELETE"},
        ],
        scope_types=["project"],
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
