"""Roles in the console, in a real browser, against a Keystone-backed API.

The console draws an action's button only when ``GET /v2/permissions`` (2.11) says the
signed-in caller passes the action's policy rule; the API still judges every click, and
a refusal is shown as the API words it, whole. A real Keystone runs on loopback
(tests/helpers/keystone_fixture.py, shared by the run: the users of USERS are left
alone; the test that revokes a role makes a user of its own); Exosuit's API runs as a
real HTTP server with ``[api] auth_strategy = keystone`` and a policy file of its own,
which a test edits to make a permission the page read stale (the API re-reads the file
within seconds, as in production).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import time
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Page, expect

from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from exosuit.db.api import Database
from tests.conftest import new_database_url
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.keystone_fixture import Keystone, authtoken_section
from tests.helpers.live import serve_wsgi

pytestmark = pytest.mark.slow

HOST = "roles-host"
VERSION = {"OpenStack-API-Version": "accelerator 2.11"}
DISABLE = "cyborg:device:disable"
WAIT = 60.0


class Api:
    """The Keystone-backed API: its URL, its policy file and its one device."""

    def __init__(self, url: str, policy_file: Path) -> None:
        self.url = url
        self.policy_file = policy_file
        self.device = ""

    def call(self, method: str, path: str, token: str) -> requests.Response:
        headers = {**VERSION, "X-Auth-Token": token}
        return requests.request(method, self.url + path, headers=headers, timeout=30)

    def permissions(self, token: str) -> dict:
        r = self.call("GET", "/v2/permissions", token)
        assert r.status_code == 200, r.text
        return r.json()

    def status(self, token: str) -> str:
        r = self.call("GET", f"/v2/devices/{self.device}", token)
        assert r.status_code == 200, r.text
        return r.json()["status"]


def _conf(workdir: Path, keystone: Keystone, db_url: str, policy_file: Path):
    path = workdir / "exosuit.conf"
    path.write_text(f"""\
[api]
auth_strategy = keystone
[database]
connection = {db_url}
[oslo_policy]
policy_file = {policy_file}
{authtoken_section(keystone, cache_time=-1)}""")
    return make_conf([str(path)])


@pytest.fixture(scope="module")
def exosuit(keystone, tmp_path_factory):
    """Exosuit's API with Keystone auth and an (empty) policy file, one FPGA reported."""
    workdir = tmp_path_factory.mktemp("dashboard-roles")
    policy_file = workdir / "policy.yaml"
    policy_file.write_text("{}\n")
    db = Database(new_database_url("sqlite", None, tmp_path_factory))
    url = db.engine.url.render_as_string(hide_password=False)
    conf = _conf(workdir, keystone, url, policy_file)
    with serve_wsgi(loadapp(conf, db)) as served:
        api = Api(served, policy_file)
        nova = keystone.token("nova")
        r = requests.put(
            f"{served}/agent/v1/hosts/{HOST}/inventory",
            json=snapshot(HOST, [fpga("0000:0c:00.0", handles=2)]),
            headers={"X-Auth-Token": nova, "X-Service-Token": nova},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        (device,) = api.call("GET", "/v2/devices", keystone.token("p1-admin")).json()["devices"]
        api.device = device["uuid"]
        yield api
    db.dispose()


@dataclasses.dataclass(frozen=True)
class Account:
    name: str
    password: str
    project: str


def _account(keystone: Keystone, name: str) -> Account:
    user = keystone.users[name]
    return Account(user.name, user.password, user.project)


def _sign_in(page: Page, account: Account) -> None:
    form = page.locator("form#sign-in")
    expect(form).to_be_visible()
    form.get_by_label("User name").fill(account.name)
    form.get_by_label("Password").fill(account.password)
    form.get_by_label("Project", exact=True).fill(account.project)
    form.get_by_role("button", name="Sign in").click()
    expect(page.locator("#who")).to_contain_text(f"{account.name} · {account.project}")


def _device_page(exosuit: Api, open_page, keystone: Keystone, name: str | Account) -> Page:
    page = open_page(f"{exosuit.url}/dashboard#/devices/{exosuit.device}")
    _sign_in(page, name if isinstance(name, Account) else _account(keystone, name))
    return page


def _device_card(page: Page):
    return page.locator("section.card").filter(
        has=page.get_by_role("heading", name="Device", exact=True)
    )


@contextlib.contextmanager
def denied_to_everyone(exosuit: Api, keystone: Keystone, rule: str):
    """``rule`` passes nobody (the policy file says "!") while inside; each change waits
    until the API answers by it (it re-reads the file within seconds)."""
    admin = keystone.token("p1-admin")

    def write(text: str, allowed: bool) -> None:
        before = exosuit.policy_file.stat().st_mtime
        exosuit.policy_file.write_text(text)
        # A visibly newer file: oslo.policy re-reads a file whose mtime changed.
        os.utime(exosuit.policy_file, (before + 10, before + 10))
        deadline = time.monotonic() + WAIT
        while exosuit.permissions(admin)["permissions"][rule] is not allowed:
            assert time.monotonic() < deadline, f"the API never read the policy file: {text}"
            time.sleep(0.2)

    write(json.dumps({rule: "!"}) + "\n", False)
    try:
        yield
    finally:
        write("{}\n", True)


# -- what each role is offered -----------------------------------------------------------


def test_the_api_says_who_the_keystone_caller_is(exosuit, keystone):
    for name, role in (("p1-admin", "admin"), ("p1-manager", "manager"), ("p1-reader", "reader")):
        answer = exosuit.permissions(keystone.token(name))
        user = keystone.users[name]
        assert (answer["user_id"], answer["user_name"]) == (user.id, name)
        assert (answer["project_id"], answer["project_name"]) == (user.project_id, "p1")
        assert role in answer["roles"]  # with the roles Keystone implies (manager → member …)
        assert answer["permissions"][DISABLE] is (role == "admin")
        assert answer["permissions"]["exosuit:permission:get"] is True


def test_the_admin_is_offered_the_device_actions(exosuit, keystone, open_page):
    page = _device_page(exosuit, open_page, keystone, "p1-admin")
    card = _device_card(page)
    expect(card).to_contain_text("enabled")
    for label in ("Disable", "Drain"):
        expect(card.get_by_role("button", name=label, exact=True)).to_be_visible()


def test_a_manager_sees_the_device_and_no_admin_action(exosuit, keystone, open_page):
    page = _device_page(exosuit, open_page, keystone, "p1-manager")
    card = _device_card(page)
    expect(card).to_contain_text(HOST)  # a manager may read devices: the page is drawn
    expect(page.locator(".failure")).to_have_count(0)
    for label in ("Disable", "Enable", "Drain", "Undrain"):
        expect(page.get_by_role("button", name=label, exact=True)).to_have_count(0)


def test_a_reader_sees_the_refusal_and_no_action(exosuit, keystone, open_page):
    page = _device_page(exosuit, open_page, keystone, "p1-reader")
    # A reader may not read devices: the API's refusal instead of the page.
    expect(page.locator(".failure")).to_contain_text("HTTP 403")
    expect(page.locator(".failure")).to_contain_text("cyborg:device:get_one")
    for label in ("Disable", "Enable", "Drain", "Undrain"):
        expect(page.get_by_role("button", name=label, exact=True)).to_have_count(0)


# -- the confirmation and the API's word ---------------------------------------------------


def test_cancel_in_the_confirmation_sends_nothing(exosuit, keystone, open_page):
    page = _device_page(exosuit, open_page, keystone, "p1-admin")
    changes: list[str] = []
    page.on(
        "request", lambda r: changes.append(f"{r.method} {r.url}") if r.method != "GET" else None
    )
    card = _device_card(page)

    card.get_by_role("button", name="Disable").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Disable device {exosuit.device}?")
    dialog.get_by_role("button", name="Cancel").click()

    expect(dialog).to_have_count(0)
    expect(card.get_by_role("button", name="Disable")).to_be_visible()
    assert changes == []
    assert exosuit.status(keystone.token("p1-admin")) == "enabled"


def test_a_stale_permission_shows_the_apis_refusal_whole(exosuit, keystone, open_page):
    """The admin's page read its permissions at sign-in; the operator then denies
    Disable to everyone in the policy file. The button is still drawn; pressing it shows
    the API's 403, word for word, and nothing changes."""
    page = _device_page(exosuit, open_page, keystone, "p1-admin")
    card = _device_card(page)
    expect(card.get_by_role("button", name="Disable")).to_be_visible()
    token = keystone.token("p1-admin")

    with denied_to_everyone(exosuit, keystone, DISABLE):
        refused = exosuit.call("POST", f"/v2/devices/{exosuit.device}/disable", token)
        assert refused.status_code == 403, refused.text
        words = json.loads(refused.json()["error_message"])["faultstring"]

        card.get_by_role("button", name="Disable").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("button", name="Disable", exact=True).click()

        notice = page.locator("#notice > span")
        expect(notice).to_have_text(f"Disable refused (HTTP 403): {words}")
        assert DISABLE in words
        assert exosuit.status(token) == "enabled"
        expect(card).to_contain_text("enabled")


@pytest.fixture
def temporary_admin(keystone):
    """A user of its own with the admin role on p1, and the URL of that role assignment
    (Keystone is shared by the run: its users of USERS are left alone)."""
    name = f"roles-admin-{secrets.token_hex(4)}"
    password = secrets.token_hex(8)
    created = keystone.admin.post(
        f"{keystone.auth_url}/users",
        json={"user": {"name": name, "password": password, "domain_id": "default"}},
    )
    user_id = created.json()["user"]["id"]
    grant = (
        f"{keystone.auth_url}/projects/{keystone.projects['p1']}/users/{user_id}"
        f"/roles/{keystone.roles['admin']}"
    )
    keystone.admin.put(grant)
    try:
        yield Account(name, password, "p1"), grant
    finally:
        keystone.admin.delete(f"{keystone.auth_url}/users/{user_id}")


def test_a_role_revoked_in_keystone_is_refused_at_the_next_click(
    exosuit, keystone, temporary_admin, open_page
):
    """The admin role is taken away in Keystone while the confirmation is open: Keystone
    revokes the tokens of that assignment, so pressing Disable gets the API's 401, shown
    whole, and the sign-in form comes back. Nothing changes."""
    account, grant = temporary_admin
    page = _device_page(exosuit, open_page, keystone, account)
    card = _device_card(page)
    card.get_by_role("button", name="Disable").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    token = page.evaluate("JSON.parse(sessionStorage.getItem('exosuit.dashboard.session')).token")

    keystone.admin.delete(grant)
    refused = exosuit.call("POST", f"/v2/devices/{exosuit.device}/disable", token)
    assert refused.status_code == 401, refused.text
    words = refused.json()["error"]["message"]

    dialog.get_by_role("button", name="Disable", exact=True).click()
    expect(page.locator("#notice > span")).to_have_text(f"Disable refused (HTTP 401): {words}")
    expect(page.locator("form#sign-in")).to_be_visible()
    assert exosuit.status(keystone.token("p1-admin")) == "enabled"
