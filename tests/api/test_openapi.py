"""The OpenAPI document (exosuit/api/openapi.py): valid OpenAPI 3.1, every route of the
route table in it with every method, served at /openapi.json without identity."""

from __future__ import annotations

import json
import re

import pytest
from openapi_spec_validator import validate

from exosuit.api import microversion, openapi
from exosuit.api.router import ROUTES, Route, Router, Since
from exosuit.api.schemas import arqs as arqs_schema
from exosuit.api.schemas import device_profiles as device_profiles_schema
from exosuit.conf import make_conf
from tests.conftest import PERSONAS

PUBLIC = tuple(make_conf([]).api.public_routes)


@pytest.fixture(scope="module")
def document() -> dict:
    return openapi.build(Router().routes, PUBLIC, "http://exosuit.test")


def test_the_document_is_valid_openapi_3_1(document):
    assert document["openapi"] == "3.1.0"
    validate(document)  # raises on the first error


def test_every_route_and_method_of_the_route_table_is_in_the_document(document):
    routes = {(path, method.lower()) for path, methods in ROUTES.items() for method in methods}
    described = {(path, method) for path, item in document["paths"].items() for method in item}
    assert described == routes


def test_every_handler_of_the_route_table_has_an_operation_and_none_is_stale():
    handlers = {handler for methods in ROUTES.values() for handler in methods.values()}
    assert set(openapi.OPERATIONS) == handlers


def test_operation_ids_are_unique(document):
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_path_parameters_are_those_of_the_template(document):
    for path, item in document["paths"].items():
        names = set(re.findall(r"\{(\w+)\}", path))
        for method, operation in item.items():
            declared = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
            assert declared == names, (path, method)


def _header(operation: dict) -> dict | None:
    found = [p for p in operation["parameters"] if p["name"] == microversion.HEADER]
    return found[0] if found else None


def test_a_route_added_by_a_microversion_says_so_and_takes_only_its_versions(document):
    for path, methods in ROUTES.items():
        route = Route(path, methods)
        for method in methods:
            operation = document["paths"][path][method.lower()]
            since = route.since_for(method)
            header = _header(operation)
            if not route.versioned:
                assert header is None, (path, method)
                continue
            values = header["schema"]["enum"]
            assert "accelerator latest" in values
            if since is None:
                assert "x-exosuit-since" not in operation, (path, method)
                assert header["required"] is False
                assert f"accelerator {microversion.VERSIONS[0]}" in values
            else:
                assert operation["x-exosuit-since"] == "{}.{}".format(*since)
                assert header["required"] is True
                lowest = min(
                    (v.split()[1] for v in values if v != "accelerator latest"),
                    key=lambda v: tuple(map(int, v.split("."))),  # 2.6 before 2.10
                )
                assert lowest == "{}.{}".format(*since), (path, method)


def test_a_method_a_path_always_had_is_not_masked(document):
    """PATCH …/program exists in every version; its GET from 2.6 on."""
    program = [m for p, m in ROUTES.items() if p == "/v2/deployables/{uuid}/program"][0]
    assert isinstance(program, Since)
    item = document["paths"]["/v2/deployables/{uuid}/program"]
    assert item["get"]["x-exosuit-since"] == "2.6"
    assert "x-exosuit-since" not in item["patch"]


def test_request_bodies_are_the_schemas_the_handlers_validate_with(document):
    post = document["paths"]["/v2/device_profiles"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert (
        body["items"]["properties"]["name"]
        == (device_profiles_schema.POST_DEVICE_PROFILE_V2_0["items"]["properties"]["name"])
    )
    patch = document["paths"]["/v2/accelerator_requests"]["patch"]
    assert patch["requestBody"]["content"]["application/json"]["schema"] == (
        arqs_schema.PATCH_ARQS_V2_0
    )
    inventory = document["paths"]["/agent/v1/hosts/{hostname}/inventory"]["put"]
    ref = inventory["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    snapshot = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert snapshot["properties"]["schema_version"] == {"const": 1}
    refs = re.findall(r'"\$ref": "([^"]+)"', json.dumps(snapshot))
    assert refs and all(r.startswith(ref + "/$defs/") for r in refs)


def test_every_error_answer_is_the_error_envelope(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, method)


def test_public_routes_need_no_token_and_the_others_do(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if openapi._is_public(path, PUBLIC):
                assert operation["security"] == [], (path, method)
                assert "403" not in operation["responses"]  # no policy either
            else:
                assert "security" not in operation, (path, method)  # the document's default
                assert {"401", "403"} <= set(operation["responses"]), (path, method)


def test_list_endpoints_document_their_paging_and_sort_keys(document):
    params = {p["name"]: p for p in document["paths"]["/v2/jobs"]["get"]["parameters"]}
    assert {"limit", "marker", "sort_key", "sort_dir", "state", "kind"} <= set(params)
    assert "id" in params["sort_key"]["schema"]["enum"]
    params = {p["name"]: p for p in document["paths"]["/v2/devices"]["get"]["parameters"]}
    assert {"type", "vendor", "hostname", "status", "limit"} <= set(params)


def test_the_document_is_served_without_identity_and_equals_the_built_one(sqlite_api):
    for headers in ({}, PERSONAS["reader"]):
        r = sqlite_api.as_(headers).get("/openapi.json")
        assert r.status_code == 200, r.text
        assert r.content_type == "application/json"
        served = r.json
        assert served == openapi.build(Router().routes, PUBLIC, "http://localhost")
    # Outside /v2: no microversion headers, and not re-routed under /v2.
    assert "OpenStack-API-Version" not in r.headers
    assert sqlite_api.get("/v2/openapi.json").status_code == 404


def test_a_handler_without_an_operation_is_still_described_from_its_docstring():
    """The test above fails for it; the served document does not (no 500)."""

    def answer(req):
        """200: a route nobody described yet."""

    routes = Router({**ROUTES, "/v2/new/{thing}": {"GET": answer}}).routes
    document = openapi.build(routes, PUBLIC)
    validate(document)
    operation = document["paths"]["/v2/new/{thing}"]["get"]
    assert operation["summary"] == "200: a route nobody described yet."
    assert operation["parameters"][0]["schema"]["pattern"] == "^[^/]+$"
