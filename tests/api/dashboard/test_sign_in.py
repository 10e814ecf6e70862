"""Signing in to the dashboard with Keystone: ``POST /dashboard`` and the page's form.

``POST /dashboard`` exchanges a user name, password and project for a project-scoped
Keystone token, which the page keeps in the tab's sessionStorage and sends as
``X-Auth-Token``; a 401 from the API shows the form again. Under noauth there is
nothing to sign in to (409). A real Keystone runs on loopback (keystone_fixture) and
Exosuit's API runs as a real HTTP server with ``[api] auth_strategy = keystone``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Page, expect

from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from exosuit.db.api import Database
from tests.conftest import ApiClient, new_database_url
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.keystone_fixture import Keystone, authtoken_section
from tests.helpers.live import serve_wsgi

HOST = "ks-host"
VERSION = {"OpenStack-API-Version": "accelerator 2.5"}
VALID = {"username": "someone", "password": "secret", "project_name": "p1"}


def error_of(response) -> dict:
    body = response.json if isinstance(response.json, dict) else response.json()
    return json.loads(body["error_message"])


# -- the endpoint under noauth (in-process) ----------------------------------------------


def test_sign_in_under_noauth_is_a_conflict(sqlite_api):
    r = sqlite_api.post("/dashboard", VALID)
    assert r.status_code == 409, r.text
    assert error_of(r)["code"] == "exosuit.dashboard.noauth"


@pytest.mark.parametrize(
    "body",
    [
        {"username": "someone", "project_name": "p1"},
        {**VALID, "password": ""},
        {**VALID, "domain": "Default"},
        ["someone", "secret"],
    ],
    ids=["no password", "empty password", "unknown field", "not an object"],
)
def test_sign_in_body_is_validated(sqlite_api, body):
    r = sqlite_api.post("/dashboard", body)
    assert r.status_code == 400, r.text
    assert error_of(r)["code"] == "exosuit.body.invalid"


# -- the endpoint and the page with Keystone ---------------------------------------------


def _conf(workdir: Path, keystone: Keystone, db_url: str, keystone_url: str):
    path = workdir / "exosuit.conf"
    path.write_text(f"""\
[api]
auth_strategy = keystone
[database]
connection = {db_url}
{authtoken_section(keystone, cache_time=-1, www_authenticate_uri=keystone_url)}""")
    return make_conf([str(path)])


@pytest.fixture(scope="module")
def exosuit(keystone, tmp_path_factory):
    """Exosuit's API with Keystone auth, served over HTTP, one host reported."""
    workdir = tmp_path_factory.mktemp("dashboard-keystone")
    db = Database(new_database_url("sqlite", None, tmp_path_factory))
    conf = _conf(
        workdir, keystone, db.engine.url.render_as_string(hide_password=False), keystone.url
    )
    with serve_wsgi(loadapp(conf, db)) as url:
        nova = keystone.token("nova")
        r = requests.put(
            f"{url}/agent/v1/hosts/{HOST}/inventory",
            json=snapshot(HOST, [fpga("0000:0c:00.0", handles=2)]),
            headers={"X-Auth-Token": nova, "X-Service-Token": nova},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        yield url
    db.dispose()


def _credentials(keystone: Keystone, name: str) -> dict:
    user = keystone.users[name]
    return {"username": user.name, "password": user.password, "project_name": user.project}


@pytest.mark.slow
def test_sign_in_returns_a_token_the_api_accepts(exosuit, keystone):
    r = requests.post(f"{exosuit}/dashboard", json=_credentials(keystone, "p1-manager"), timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["user"], body["project"]) == ("p1-manager", "p1")
    assert "manager" in body["roles"] and body["expires_at"]
    assert r.headers["Cache-Control"] == "no-store"
    devices = requests.get(
        f"{exosuit}/v2/devices", headers={**VERSION, "X-Auth-Token": body["token"]}, timeout=30
    )
    assert devices.status_code == 200, devices.text
    assert [d["hostname"] for d in devices.json()["devices"]] == [HOST]


@pytest.mark.slow
@pytest.mark.parametrize(
    "change",
    [{"password": "wrong"}, {"project_name": "p2"}, {"username": "nobody"}],
    ids=["wrong password", "project without a role", "unknown user"],
)
def test_sign_in_refused_by_keystone_is_401(exosuit, keystone, change):
    body = {**_credentials(keystone, "p1-member"), **change}
    r = requests.post(f"{exosuit}/dashboard", json=body, timeout=30)
    assert r.status_code == 401, r.text
    assert json.loads(r.json()["error_message"])["code"] == "exosuit.dashboard.sign_in_refused"


@pytest.mark.slow
def test_sign_in_with_keystone_unreachable_is_502(keystone, tmp_path, sqlite_database):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    conf = _conf(tmp_path, keystone, "sqlite://", closed)
    r = ApiClient(loadapp(conf, sqlite_database)).post("/dashboard", VALID)
    assert r.status_code == 502, r.text
    assert error_of(r)["code"] == "exosuit.dashboard.keystone_unavailable"


def _sign_in(page: Page, credentials: dict) -> None:
    form = page.locator("form#sign-in")
    expect(form).to_be_visible()
    form.get_by_label("User name").fill(credentials["username"])
    form.get_by_label("Password").fill(credentials["password"])
    form.get_by_label("Project", exact=True).fill(credentials["project_name"])
    form.get_by_role("button", name="Sign in").click()


def _hosts(page: Page):
    return page.locator("section.card").filter(
        has=page.get_by_role("heading", name="Hosts", exact=True)
    )


@pytest.mark.slow
def test_the_page_asks_for_a_sign_in_and_then_shows_the_fleet(exosuit, keystone, open_page):
    page = open_page(f"{exosuit}/dashboard")
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()

    _sign_in(page, _credentials(keystone, "p1-manager"))

    expect(_hosts(page).get_by_role("link", name=HOST, exact=True)).to_be_visible()
    expect(page.locator("#who")).to_contain_text("p1-manager · p1")
    # The token lives in the tab: a reload keeps it, and nothing else stores it.
    page.reload()
    expect(_hosts(page).get_by_role("link", name=HOST, exact=True)).to_be_visible()
    assert page.context.cookies() == []
    assert page.evaluate("localStorage.length") == 0

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("form#sign-in")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0


@pytest.mark.slow
def test_a_refused_sign_in_says_why(exosuit, keystone, open_page):
    page = open_page(f"{exosuit}/dashboard")
    _sign_in(page, {**_credentials(keystone, "p1-manager"), "password": "wrong"})
    expect(page.locator("form#sign-in [role=alert]")).to_contain_text(
        "Keystone refused these credentials"
    )
    expect(page.locator("form#sign-in")).to_be_visible()


@pytest.mark.slow
def test_a_reader_signed_in_sees_the_refusal(exosuit, keystone, open_page):
    page = open_page(f"{exosuit}/dashboard")
    _sign_in(page, _credentials(keystone, "p1-reader"))
    expect(page.locator(".failure")).to_contain_text("HTTP 403")
    page.get_by_role("link", name="ARQs").click()
    expect(page.get_by_role("heading", name="Accelerator requests", level=1)).to_be_visible()
    expect(page.locator(".failure")).to_have_count(0)


@pytest.mark.slow
def test_a_pasted_token_works_until_it_is_revoked(exosuit, keystone, open_page):
    token = keystone.token("p1-admin")
    page = open_page(f"{exosuit}/dashboard")
    page.get_by_text("Or paste a Keystone token").click()
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Use this token").click()
    expect(_hosts(page).get_by_role("link", name=HOST, exact=True)).to_be_visible()

    keystone.revoke(token)

    # The next refresh gets 401 from the API: the form is back.
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    expect(page.locator("form#sign-in")).to_be_visible()
