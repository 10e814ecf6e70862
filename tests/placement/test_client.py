"""The Placement client against real Placement: configuration, microversion, errors."""

from __future__ import annotations

import uuid

import pytest

from exosuit import exceptions
from exosuit.placement import client as placement_client
from exosuit.placement.client import PlacementClient, make_adapter, use_placement_url
from tests.conftest import make_test_conf


@pytest.fixture
def client(placement, placement_api) -> PlacementClient:
    conf = make_test_conf()
    use_placement_url(conf, placement.url)
    return PlacementClient(make_adapter(conf))


def test_no_auth_plugin_means_no_placement():
    assert make_adapter(make_test_conf()) is None


def test_placement_url_defaults_to_standalone_unless_configured(tmp_path):
    conf = make_test_conf()
    use_placement_url(conf, "http://placement.example:8778")
    assert conf.placement.manage_compute_providers is True
    assert conf.placement.auth_type == "admin_token"
    assert conf.placement.endpoint_override == "http://placement.example:8778"

    from exosuit.conf import make_conf

    path = tmp_path / "exosuit.conf"
    path.write_text(
        "[placement]\nmanage_compute_providers = false\n"
        "auth_type = password\nauth_url = http://keystone.example/v3\n"
        "username = exosuit\npassword = secret\n"
    )
    conf = make_conf([str(path)])
    use_placement_url(conf, "http://placement.example:8778")
    assert conf.placement.manage_compute_providers is False  # the file's choice stays
    assert conf.placement.auth_type == "password"  # and its credentials


def test_requests_name_their_microversion_and_are_counted(client):
    response = client.adapter.request(
        "/",
        "GET",
        raise_exc=False,
        microversion=placement_client.MICROVERSION,
        microversion_service_type="placement",
    )
    assert response.status_code == 200
    assert client.find_provider(f"nobody-{uuid.uuid4().hex}") is None
    provider = client.create_provider(str(uuid.uuid4()), f"p-{uuid.uuid4().hex}", None)
    assert provider["generation"] == 0  # 1.20+: POST returns the provider
    assert dict(client.calls) == {"GET": 1, "POST": 1}
    client.delete_provider(provider["uuid"])


def test_placement_errors_are_translated(client):
    rp = str(uuid.uuid4())
    name = f"p-{uuid.uuid4().hex}"
    client.create_provider(rp, name, None)
    with pytest.raises(exceptions.PlacementConflict) as conflict:
        client.create_provider(str(uuid.uuid4()), name, None)
    assert conflict.value.placement_code == placement_client.DUPLICATE_NAME
    with pytest.raises(exceptions.PlacementConflict) as stale:
        client.set_traits(rp, 7, ["OWNER_CYBORG"])
    assert stale.value.placement_code == placement_client.CONCURRENT_UPDATE
    with pytest.raises(exceptions.PlacementNotFound):
        client.delete_provider(str(uuid.uuid4()))
    with pytest.raises(exceptions.PlacementError) as bad:
        client.set_traits(rp, 0, ["CUSTOM_NEVER_CREATED_" + uuid.uuid4().hex[:6].upper()])
    assert bad.value.kwargs["status"] == 400
    assert type(bad.value) is exceptions.PlacementError
    assert client.get_provider(str(uuid.uuid4())) is None
    with pytest.raises(exceptions.PlacementError) as too_new:
        client.request("GET", "/resource_providers", microversion="1.99")
    assert "does not speak microversion 1.99" in str(too_new.value)
    client.delete_provider(rp)


def test_unreachable_placement_is_unavailable():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conf = make_test_conf()
    use_placement_url(conf, f"http://127.0.0.1:{port}")
    client = PlacementClient(make_adapter(conf))
    with pytest.raises(exceptions.PlacementUnavailable) as error:
        client.find_provider("anything")
    assert "ConnectFailure" in str(error.value)


def test_custom_names_are_created_once(client, placement_api):
    trait = f"CUSTOM_ONCE_{uuid.uuid4().hex[:6].upper()}"
    rc = f"CUSTOM_RC_{uuid.uuid4().hex[:6].upper()}"
    client.ensure_traits([trait, "OWNER_CYBORG"])
    client.ensure_traits([trait])
    client.ensure_resource_class(rc)
    client.ensure_resource_class(rc)
    assert client.calls["PUT"] == 2
    placement_api.request("GET", f"/traits/{trait}", expect=204)
    placement_api.request("GET", f"/resource_classes/{rc}", expect=200)
