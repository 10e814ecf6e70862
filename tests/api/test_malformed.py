"""Malformed requests to every operation: no 5xx, and every refusal in the error envelope.

What the document cannot generate, because no schema describes it: a path or query that
is not UTF-8 or holds a NUL, a body that is not UTF-8, JSON nested far deeper than any
body, numbers no column holds (10**400, -2**63 - 1, 1e309), lone surrogates, a body cut
short, an identity header longer than its column. Hypothesis picks the operation (any
route and method of the route table), the malformation and the bytes; each request runs
in-process on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import uuid

import hypothesis
import pytest
import webob
from hypothesis import strategies as st

from exosuit.api.deploy import loadapp
from exosuit.api.router import ROUTES
from exosuit.db.api import Database
from tests.conftest import make_test_conf, new_database_url

OPERATIONS = sorted((path, method) for path, methods in ROUTES.items() for method in methods)
HEADERS = st.sampled_from([{}, {"OpenStack-API-Version": "accelerator latest"}])


def _path(template: str, value: str) -> str:
    return re.sub(r"\{\w+\}", value, template)


# Each: (operation, drawn bytes) -> (PATH_INFO as the server receives it, query, body, headers)
def _bad_path(template: str, data: bytes) -> tuple[str, str, bytes | None, dict]:
    segment = (data or b"\xff").decode("latin-1") + "\xff"  # raw bytes: not UTF-8
    if "{" in template:
        return _path(template, segment), "", None, {}
    return template.rstrip("/") + "/" + segment, "", None, {}


def _nul_path(template: str, data: bytes) -> tuple[str, str, bytes | None, dict]:
    return _path(template, "a\x00b") if "{" in template else template + "\x00", "", None, {}


def _bad_query(template: str, data: bytes) -> tuple[str, str, bytes | None, dict]:
    name = st_names[len(data) % len(st_names)]
    return _path(template, str(uuid.uuid4())), f"{name}=%ff{urllib.parse.quote(data)}", None, {}


def _nul_query(template: str, data: bytes) -> tuple[str, str, bytes | None, dict]:
    name = st_names[len(data) % len(st_names)]
    return _path(template, str(uuid.uuid4())), f"{name}=a%00b", None, {}


def _body(raw: bytes):
    def make(template: str, data: bytes) -> tuple[str, str, bytes | None, dict]:
        return _path(template, str(uuid.uuid4())), "", raw, {}

    return make


def _random_body(template: str, data: bytes) -> tuple[str, str, bytes | None, dict]:
    return _path(template, str(uuid.uuid4())), "", data, {}


def _long_identity(template: str, data: bytes) -> tuple[str, str, bytes | None, dict]:
    headers = {"X-Project-Id": "p" * 300, "X-User-Id": "u", "X-Roles": "admin"}
    return _path(template, str(uuid.uuid4())), "", None, headers


st_names = ["limit", "marker", "name", "hostname", "state", "instance", "value", "arqs"]
MALFORMATIONS = {
    "path not UTF-8": _bad_path,
    "NUL in the path": _nul_path,
    "query not UTF-8": _bad_query,
    "NUL in the query": _nul_query,
    "body not UTF-8": _body(b'{"name": "\xff\xfe"}'),
    "deep nesting": _body(b"[" * 50_000 + b"]" * 50_000),
    "deep objects": _body(b'{"a":' * 5_000 + b"1" + b"}" * 5_000),
    "huge integer": _body(json.dumps({"deployable_id": 10**400, "limit": 10**400}).encode()),
    "int64 overflow": _body(b'[{"name": "x", "groups": [{"resources:FPGA": -%d}]}]' % (2**63 + 1)),
    "float overflow": _body(b'{"numa_node": 1e309, "schema_version": 1e309, "hash": "x"}'),
    "lone surrogate": _body(b'{"device_profile_name": "\\ud800", "state": "\\udfff"}'),
    "NUL in a string": _body(b'{"name": "a\\u0000b", "format": "x", "key": "\\u0000"}'),
    "cut short": _body(b'{"device_profile_name": "abc'),
    "random bytes": _random_body,
    "identity too long": _long_identity,
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app(request, db_servers, tmp_path_factory):
    db = Database(new_database_url(request.param, db_servers, tmp_path_factory))
    state = tmp_path_factory.mktemp("state")
    yield loadapp(make_test_conf(**{"state_path": str(state), "api.program_wait": 0.2}), db)
    db.dispose()


@hypothesis.settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
@hypothesis.given(
    operation=st.sampled_from(OPERATIONS),
    how=st.sampled_from(sorted(MALFORMATIONS)),
    data=st.binary(max_size=64),
    headers=HEADERS,
)
def _check(app, operation, how, data, headers):
    template, method = operation
    path, query, body, extra = MALFORMATIONS[how](template, data)
    req = webob.Request.blank("/")
    req.method = method
    req.environ["PATH_INFO"] = path
    req.environ["QUERY_STRING"] = query
    for name, value in {**headers, **extra}.items():
        req.headers[name] = value
    if body is not None:
        req.body = body
        req.content_type = "application/json"
    r = req.get_response(app)
    assert r.status_code < 500, (how, method, path, r.status, r.body[:300])
    if r.status_code >= 400 and r.status_code != 401:
        fault = json.loads(r.json["error_message"])
        assert fault["code"].startswith("exosuit."), fault


def test_malformed_requests_get_no_5xx_and_the_error_envelope(app):
    _check(app)
