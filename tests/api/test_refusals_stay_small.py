"""Issue 24, item 4: a refusal is small and cheap. A validation error quotes at most a
short, marked excerpt of the invalid value (an 8 MiB body gave a 12.6 MB error); a large
invalid body is explained without jsonschema's walk over all of it (a 30 MiB array took
minutes); a body over the limit is refused from its Content-Length, unread. In-process on
SQLite; the same through exosuit serve and exosuit-api: tests/cmd/test_slow_clients.py."""

from __future__ import annotations

import io
import json

import pytest
import webob

from exosuit.api.deploy import loadapp
from exosuit.db import migration
from exosuit.db.api import Database
from tests.conftest import make_test_conf
from tests.helpers.inventory import fpga, snapshot

INVENTORY = "/agent/v1/hosts/h1/inventory"
MiB = 1024 * 1024
SMALL = 4096  # what a refusal may weigh at most


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('db')}/exosuit.sqlite")
    migration.upgrade(db)
    yield loadapp(make_test_conf(), db)
    db.dispose()


def put(app, path: str, body: bytes, method: str = "PUT") -> webob.Response:
    req = webob.Request.blank(path, method=method, body=body)
    req.content_type = "application/json"
    return req.get_response(app)


def fault(response: webob.Response) -> dict:
    return json.loads(response.json["error_message"])


def test_an_8_mib_invalid_value_is_quoted_as_a_short_marked_excerpt(app):
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    report["devices"][0]["model"] = "x" * (8 * MiB)
    response = put(app, INVENTORY, json.dumps(report).encode())
    assert response.status_int == 400, response.text
    assert len(response.body) < SMALL  # was 12.6 MB: the whole value, escaped twice
    error = fault(response)
    assert error["code"] == "exosuit.body.invalid"
    assert error["faultstring"].startswith("Invalid request body at devices/0/model: ")


def test_a_30_mib_json_array_is_refused_in_a_few_words(app):
    body = json.dumps(list(range(3_600_000))).encode()
    assert 29 * MiB < len(body) < 32 * MiB  # under the agent API's 32 MiB limit
    response = put(app, INVENTORY, body)
    assert response.status_int == 400
    assert len(response.body) < SMALL
    assert fault(response)["faultstring"] == "Invalid request body at (body): must be object"


def test_a_30_mib_array_inside_a_report_is_refused_without_a_walk_over_every_item(app):
    """Before: jsonschema's best_match made (and repr'd) one error per item: minutes."""
    report = snapshot("h1", [fpga("0000:0c:00.0")])
    report["devices"] = list(range(3_600_000))
    response = put(app, INVENTORY, json.dumps(report).encode())
    assert response.status_int == 400
    assert len(response.body) < SMALL
    assert fault(response)["faultstring"].startswith("Invalid request body at devices: ")


def test_a_small_body_keeps_jsonschemas_explanation_with_the_value_cut(app):
    response = put(
        app,
        "/v2/device_profiles",
        json.dumps([{"name": "n" * 5000, "groups": [{}]}]).encode(),
        "POST",
    )
    error = fault(response)
    assert response.status_int == 400, error
    assert len(response.body) < SMALL
    assert "characters in all]" in error["faultstring"]  # the mark of an excerpt
    assert "n" * 300 not in error["faultstring"]


class _Unreadable(io.RawIOBase):
    """A body that must not be read."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        raise AssertionError("the body over the limit was read")


@pytest.mark.parametrize(
    ("path", "size"), [(INVENTORY, 40 * MiB), ("/v2/device_profiles", 30 * MiB)]
)
def test_a_body_over_the_limit_is_refused_from_its_content_length_unread(app, path, size):
    req = webob.Request.blank(path, method="PUT" if path == INVENTORY else "POST")
    req.environ["wsgi.input"] = _Unreadable()
    req.content_type = "application/json"
    req.content_length = size
    response = req.get_response(app)
    assert response.status_int == 413
    assert len(response.body) < SMALL
    assert fault(response)["code"] == "exosuit.body.too_large"
