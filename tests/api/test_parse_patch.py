"""parse_patch (exosuit/api/handlers/arqs.py): Nova's bind/unbind map in, a Patch or
the 4xx that names what is wrong out, with no request at all."""

from __future__ import annotations

import pytest

from exosuit.api import wsgi
from exosuit.api.handlers.arqs import Patch, parse_patch
from exosuit.db.arqs import Binding

ARQ = "1c1b0b4e-8e33-4a0b-9a37-2d1bd4a6f0a1"
OTHER = "7f9a8e2d-1c3b-4d5e-8f60-718293a4b5c6"
RP = "5d2c1a9e-7a41-4f0e-bd58-3c2a9e0f6b11"
INSTANCE = "b7e3a1f4-09c2-4e6d-8a5b-c1d2e3f4a5b6"


def bind_ops(*, host="host1", rp=RP, instance=INSTANCE, project=None, slash="/"):
    ops = [
        {"op": "add", "path": f"{slash}hostname", "value": host},
        {"op": "add", "path": f"{slash}device_rp_uuid", "value": rp},
        {"op": "add", "path": f"{slash}instance_uuid", "value": instance},
    ]
    if project is not None:
        ops.append({"op": "add", "path": f"{slash}project_id", "value": project})
    return ops


UNBIND = [{"op": "remove", "path": "/hostname"}]


def refusal(body, *, project_id_allowed=True) -> wsgi.ApiError:
    with pytest.raises(wsgi.ApiError) as error:
        parse_patch(body, project_id_allowed=project_id_allowed)
    return error.value


def test_a_bind_of_two_arqs():
    patch = parse_patch({ARQ: bind_ops(), OTHER: bind_ops(host="host2")}, project_id_allowed=False)
    assert patch == Patch(
        binds=[
            Binding(uuid=ARQ, hostname="host1", device_rp_uuid=RP, instance_uuid=INSTANCE),
            Binding(uuid=OTHER, hostname="host2", device_rp_uuid=RP, instance_uuid=INSTANCE),
        ]
    )
    assert patch.uuids == {ARQ, OTHER}
    assert not patch.sets_project_id


def test_an_unbind():
    patch = parse_patch({ARQ: UNBIND, OTHER: UNBIND}, project_id_allowed=False)
    assert patch == Patch(unbinds=[ARQ, OTHER])
    assert patch.uuids == {ARQ, OTHER}


def test_uuids_come_out_in_lower_case_and_the_slash_is_optional():
    body = {ARQ.upper(): bind_ops(rp=RP.upper(), instance=INSTANCE.upper(), slash="")}
    [binding] = parse_patch(body, project_id_allowed=False).binds
    assert (binding.uuid, binding.device_rp_uuid, binding.instance_uuid) == (ARQ, RP, INSTANCE)


def test_project_id_is_parsed_where_the_microversion_allows_it():
    patch = parse_patch({ARQ: bind_ops(project="p9")}, project_id_allowed=True)
    assert patch.binds[0].project_id == "p9"
    assert patch.sets_project_id


@pytest.mark.parametrize(
    "ops",
    [
        pytest.param(bind_ops(project="p9"), id="add"),
        pytest.param([{"op": "remove", "path": "/project_id"}], id="remove"),
    ],
)
def test_project_id_below_microversion_2_1_is_406(ops):
    error = refusal({ARQ: ops}, project_id_allowed=False)
    assert (error.status, error.code) == (406, "exosuit.microversion")
    assert "2.1" in error.message


def test_removing_project_id_where_allowed_is_an_unbind():
    patch = parse_patch({ARQ: [{"op": "remove", "path": "project_id"}]}, project_id_allowed=True)
    assert patch == Patch(unbinds=[ARQ])
    assert not patch.sets_project_id


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param([{"op": "add"}], "(body)", id="a-list"),
        pytest.param("bind", "(body)", id="a-string"),
        pytest.param({}, "(body)", id="empty"),
        pytest.param({"not-a-uuid": UNBIND}, "(body)", id="key-not-a-uuid"),
        pytest.param({ARQ: []}, ARQ, id="no-ops"),
        pytest.param({ARQ: [{"op": "replace", "path": "/hostname", "value": "h"}]}, ARQ, id="op"),
        pytest.param({ARQ: [{"op": "remove", "path": "/state"}]}, ARQ, id="unknown-path"),
        pytest.param({ARQ: bind_ops(host="")}, ARQ, id="empty-value"),
        pytest.param({ARQ: [{"op": "add", "path": "/hostname", "value": 1}]}, ARQ, id="number"),
        pytest.param({ARQ: [{"op": "add", "path": "/hostname"}]}, ARQ, id="add-without-value"),
    ],
)
def test_a_body_the_schema_refuses_is_400(body, where):
    error = refusal(body)
    assert (error.status, error.code) == (400, "exosuit.body.invalid")
    assert f"at {where}" in error.message


def test_binding_and_unbinding_in_one_patch_is_400():
    error = refusal({ARQ: bind_ops(), OTHER: UNBIND})
    assert (error.status, error.code) == (400, "exosuit.arq.patch")
    assert "not both" in error.message


def test_a_bind_without_its_three_fields_is_400_naming_the_absent_ones():
    error = refusal({ARQ: bind_ops()[:1]})
    assert (error.status, error.code) == (400, "exosuit.arq.patch")
    assert error.message == f"{ARQ}: fields absent in patch: device_rp_uuid, instance_uuid."


@pytest.mark.parametrize("field", ["device_rp_uuid", "instance_uuid"])
def test_a_bind_to_something_that_is_not_a_uuid_is_400(field):
    ops = bind_ops(**{"rp" if field == "device_rp_uuid" else "instance": "gpu0"})
    error = refusal({ARQ: ops})
    assert (error.status, error.code) == (400, "exosuit.arq.patch")
    assert error.message == f"{ARQ}: /{field} must be a UUID."
