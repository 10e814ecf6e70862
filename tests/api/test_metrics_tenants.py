"""Who sees what on /metrics (issue 24, item 1; doc/metrics.md, "Who sees what").

A caller without credentials gets the fleet's series only: no host name, PCI address,
device, ARQ, instance, claim or project in any label (or anywhere in the text). An
authenticated admin gets the per-device series too; an authenticated non-admin gets the
fleet's. Tested in-process under noauth, and over HTTP with a real Keystone validating
real tokens (keystonemiddleware), where ``GET /v2/accelerator_requests`` without a token
answers 401.
"""

from __future__ import annotations

import contextlib
import gzip
import uuid

import pytest
import requests

from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from exosuit.db.api import Database
from tests.conftest import PERSONAS, ApiClient, new_database_url
from tests.helpers.keystone_fixture import Keystone, authtoken_section
from tests.helpers.live import serve_wsgi
from tests.helpers.metrics import FPGA_A, FPGA_B, GPU_A, HOST, OTHER, Fleet, Scrape, seed

# The labels that name a tenant, a host or a place: never on the public series.
TENANT_LABELS = {
    "hostname",
    "pci_address",
    "device_uuid",
    "arq_uuid",
    "instance_uuid",
    "claim_uuid",
    "project_id",
}
DETAIL_ONLY = {
    "exosuit_device_info",
    "exosuit_device_attach_handles",
    "exosuit_device_holder",
    "exosuit_device_utilization_percent",
    "exosuit_host_report_age_seconds",
}


def tenant_values(fleet: Fleet, detail: Scrape) -> set[str]:
    """Every value that names a tenant, a host or a place in this fleet: what the
    admin's scrape shows under TENANT_LABELS, and what the seed made."""
    found = {
        value
        for s in detail.samples
        for name, value in s.labels.items()
        if name in TENANT_LABELS and value
    }
    found |= {HOST, OTHER, FPGA_A, FPGA_B, GPU_A, fleet.arq_uuid, fleet.instance}
    found |= {fleet.claim["uuid"], *(d["uuid"] for d in fleet.devices.values())}
    return found


def assert_public(found: Scrape, text: str, secrets: set[str]) -> None:
    """No label names a tenant, no text carries one; the fleet's counts are there."""
    assert not [s for s in found.samples if TENANT_LABELS & set(s.labels)]
    assert not {s.name for s in found.samples} & DETAIL_ONLY
    assert not [v for v in secrets if v in text]
    # The fleet's own series: three devices (two FPGAs, a GPU), two handles held.
    assert sum(s.value for s in found.of("exosuit_devices")) == 3
    assert sum(s.value for s in found.of("exosuit_devices", type="FPGA")) == 2
    assert sum(s.value for s in found.of("exosuit_attach_handles", state="in_use")) == 2
    assert sum(s.value for s in found.of("exosuit_hosts")) == 2
    assert found.of("exosuit_jobs") and found.of("exosuit_placement_sync_lag_seconds")


def assert_detail(found: Scrape, fleet: Fleet) -> None:
    holders = found.of("exosuit_device_holder")
    assert {s.labels["arq_uuid"] for s in holders} >= {fleet.arq_uuid}
    assert {s.labels["instance_uuid"] for s in holders} >= {fleet.instance}
    assert {s.labels["claim_uuid"] for s in holders} >= {fleet.claim["uuid"]}
    assert found.of("exosuit_device_info", hostname=HOST, pci_address=GPU_A)
    assert found.of("exosuit_host_report_age_seconds", hostname=OTHER)
    # The fleet's series are in the admin's answer too (one scrape job can read both).
    assert sum(s.value for s in found.of("exosuit_devices")) == 3


# -- noauth (in-process) ---------------------------------------------------------------


@pytest.fixture
def fleet(sqlite_database, tmp_path) -> Fleet:
    return seed(sqlite_database, tmp_path)


def _get(client, **headers) -> tuple[Scrape, str, str]:
    r = client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    return Scrape(r.text), r.text, r.headers["Exosuit-Metrics"]


def test_noauth_a_caller_without_credentials_gets_no_tenant_data(fleet):
    detail, _, kind = _get(fleet.world.admin)
    assert kind == "detail"
    assert_detail(detail, fleet)
    found, text, kind = _get(fleet.world.api)
    assert kind == "fleet"
    assert_public(found, text, tenant_values(fleet, detail))


def test_noauth_a_project_member_gets_the_fleet_series_only(fleet):
    detail, _, _ = _get(fleet.world.admin)
    found, text, kind = _get(fleet.world.member)
    assert kind == "fleet"
    assert_public(found, text, tenant_values(fleet, detail))


@pytest.mark.parametrize(
    "credentials",
    [{"Authorization": "Bearer anything"}, {"X-Auth-Token": "anything"}, PERSONAS["admin"]],
    ids=["bearer", "x-auth-token", "identity-headers"],
)
def test_noauth_credentials_get_the_detail(fleet, credentials):
    """noauth trusts whoever claims an identity (as for every other route): a
    Prometheus scrape with ``authorization: credentials`` gets the per-device series."""
    found, _, kind = _get(fleet.world.api, **credentials)
    assert kind == "detail"
    assert_detail(found, fleet)


def test_the_admin_answer_varies_with_credentials_for_caches(fleet):
    r = fleet.world.api.get("/metrics")
    assert {"X-Auth-Token", "Authorization"} <= {v.strip() for v in r.headers["Vary"].split(",")}


def test_the_detail_rule_can_be_given_to_another_role(sqlite_database, tmp_path):
    """``exosuit:metrics:detail`` is a policy rule: an operator can let a monitoring
    role (here: reader) see the per-device series."""
    policy = tmp_path / "policy.yaml"
    policy.write_text('"exosuit:metrics:detail": "role:reader"\n')
    fleet = seed(sqlite_database, tmp_path)
    url = sqlite_database.url.render_as_string(False)
    path = tmp_path / "exosuit.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\n"
        f"[oslo_policy]\npolicy_file = {policy}\n"
    )
    client = ApiClient(loadapp(make_conf([str(path)]), sqlite_database))
    found, _, kind = _get(client, **PERSONAS["reader"])
    assert kind == "detail"
    assert_detail(found, fleet)
    _, _, kind = _get(client, **PERSONAS["service"])
    assert kind == "fleet"


# -- Keystone (over HTTP, real tokens) -------------------------------------------------


def _keystone_conf(workdir, keystone: Keystone, db_url: str):
    path = workdir / f"exosuit-{uuid.uuid4().hex[:8]}.conf"
    path.write_text(f"""\
[DEFAULT]
state_path = {workdir}
[api]
auth_strategy = keystone
[database]
connection = {db_url}
{authtoken_section(keystone)}""")
    return make_conf([str(path)])


@pytest.fixture(scope="module")
def keystone_fleet(keystone, tmp_path_factory):
    """A fleet seeded in-process (noauth), then served by an API under Keystone on the
    same database: (url, fleet, tokens by user)."""
    workdir = tmp_path_factory.mktemp("metrics-keystone")
    url = new_database_url("sqlite", None, tmp_path_factory)
    db = Database(url)
    fleet = seed(db, workdir)
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(serve_wsgi(loadapp(_keystone_conf(workdir, keystone, url), db)))
        tokens = {user: keystone.token(user) for user in ("p1-admin", "p1-member", "p1-reader")}
        yield base, fleet, tokens
    db.dispose()


def _http(base: str, **headers) -> requests.Response:
    return requests.get(f"{base}/metrics", headers=headers, timeout=60)


def _scrape(r: requests.Response) -> tuple[Scrape, str]:
    assert r.status_code == 200, r.text
    return Scrape(r.text), r.text


def test_keystone_a_caller_without_a_token_gets_no_tenant_data(keystone_fleet):
    base, fleet, tokens = keystone_fleet
    # The API itself refuses him the ARQs…
    r = requests.get(f"{base}/v2/accelerator_requests", timeout=60)
    assert r.status_code == 401, r.text
    # …and /metrics, public, names none of them, nor any host or project.
    detail, _ = _scrape(_http(base, **{"X-Auth-Token": tokens["p1-admin"]}))
    assert_detail(detail, fleet)
    r = _http(base, **{"Accept-Encoding": "gzip"})
    found, text = _scrape(r)
    assert r.headers["Exosuit-Metrics"] == "fleet"
    assert_public(found, text, tenant_values(fleet, detail))


def test_keystone_an_admin_token_gets_the_detail_also_as_a_bearer_token(keystone_fleet):
    """Prometheus sends ``authorization: {credentials_file: …}`` as ``Authorization:
    Bearer <token>``: the API passes it to keystonemiddleware as X-Auth-Token."""
    base, fleet, tokens = keystone_fleet
    r = _http(base, Authorization=f"Bearer {tokens['p1-admin']}")
    found, _ = _scrape(r)
    assert r.headers["Exosuit-Metrics"] == "detail"
    assert_detail(found, fleet)


@pytest.mark.parametrize("user", ["p1-member", "p1-reader"])
def test_keystone_a_non_admin_token_gets_the_fleet_series(keystone_fleet, user):
    base, fleet, tokens = keystone_fleet
    detail, _ = _scrape(_http(base, **{"X-Auth-Token": tokens["p1-admin"]}))
    r = _http(base, **{"X-Auth-Token": tokens[user]})
    found, text = _scrape(r)
    assert r.headers["Exosuit-Metrics"] == "fleet"
    assert_public(found, text, tenant_values(fleet, detail))


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Auth-Token": "not-a-token"},
        {"Authorization": "Bearer not-a-token"},
        # Identity headers without a token: keystonemiddleware, not the caller, says who.
        {"X-Roles": "admin", "X-Project-Id": "p", "X-User-Id": "u"},
    ],
    ids=["bad-token", "bad-bearer", "forged-identity"],
)
def test_keystone_credentials_that_do_not_authenticate_get_401(keystone_fleet, headers):
    base, _, _ = keystone_fleet
    r = _http(base, **headers)
    assert r.status_code == 401, r.text
    assert "exosuit_device_holder" not in r.text


def test_keystone_gzip_is_still_served_to_the_public(keystone_fleet):
    base, _, _ = keystone_fleet
    r = requests.get(
        f"{base}/metrics", headers={"Accept-Encoding": "gzip"}, timeout=60, stream=True
    )
    assert r.headers["Content-Encoding"] == "gzip"
    assert b"exosuit_devices" in gzip.decompress(r.raw.read())
