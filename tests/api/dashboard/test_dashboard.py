"""The dashboard in a real browser, against a real ``exosuit serve`` (noauth).

One ``exosuit serve`` for the module: its simulated host reports a fake FPGA and a
GPU. The tests open /dashboard as an admin (no identity headers), a manager and a
reader (noauth identity headers on every request of the browser), compare what the
pages show with what the API returns, change the fleet through the API (a new host's
report) and watch the page follow without a reload, and click the admin actions.
Whatever a click should or should not have changed is checked through the API.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import re
import time
import uuid

import pytest
import requests
import sqlalchemy as sa
from playwright.sync_api import Page, expect

from exosuit.db import models
from exosuit.db.api import Database
from tests.api.dashboard.conftest import PHONE, make_failed_job, screenshot
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.serve_fixture import serving

pytestmark = pytest.mark.slow

VERSION = {"OpenStack-API-Version": "accelerator 2.5"}
PROJECT = "p1" + "0" * 30
MANAGER = {"X-User-Id": "u-manager", "X-Project-Id": PROJECT, "X-Roles": "manager,member,reader"}
READER = {"X-User-Id": "u-reader", "X-Project-Id": PROJECT, "X-Roles": "reader"}
# Under noauth a request without identity headers is an admin with the service role.
ADMIN: dict[str, str] = {}
WAIT = 60.0
STALE_HOST = "browser-stale-host"
STALE_AFTER = 300  # [api] stale_report_after's default: the summary's "stale" hosts


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("dashboard")) as started:
        yield started


def api(server, method: str, path: str, **kwargs) -> requests.Response:
    """A call to the API as an admin at microversion 2.5."""
    headers = {**VERSION, **kwargs.pop("headers", {})}
    return requests.request(method, server.url + path, headers=headers, timeout=10, **kwargs)


def api_json(server, path: str):
    r = api(server, "GET", path)
    assert r.status_code == 200, r.text
    return r.json()


def dashboard(server, route: str = "/") -> str:
    return f"{server.url}/dashboard#{route}"


def card(page: Page, title: str):
    """The section of the page whose heading is ``title``."""
    return page.locator("section.card").filter(
        has=page.get_by_role("heading", name=title, exact=True)
    )


def report(server, hostname: str, devices) -> None:
    """A host's inventory, sent through the agent API as its agent would."""
    r = api(
        server, "PUT", f"/agent/v1/hosts/{hostname}/inventory", json=snapshot(hostname, devices)
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def failed_job(server) -> dict:
    """A failed job of the conductor of ``server``."""
    return make_failed_job(server, "dashboard_test")


@pytest.fixture(scope="module")
def stale_host(server) -> str:
    """A host whose last report was three hours ago: it reported once, and its
    ``last_report_at`` was then moved back in serve's database (no agent reports the past)."""
    report(server, STALE_HOST, [fpga("0000:0f:00.0", handles=2)])
    hosts = models.hosts
    db = Database(f"sqlite:///{server.data_dir}/exosuit.sqlite")
    try:
        db.write(
            lambda conn: conn.execute(
                sa.update(hosts)
                .where(hosts.c.hostname == STALE_HOST)
                .values(last_report_at=models.utcnow() - dt.timedelta(hours=3))
            )
        )
    finally:
        db.dispose()
    return STALE_HOST


@pytest.fixture
def held_handle(server):
    """An attach handle of the simulated FPGA held by a bound ARQ (deleted afterwards)."""
    name = f"browser-held-{uuid.uuid4().hex[:6]}"
    r = api(
        server,
        "POST",
        "/v2/device_profiles",
        json=[{"name": name, "groups": [{"resources:FPGA": "1"}]}],
    )
    assert r.status_code == 201, r.text
    r = api(server, "POST", "/v2/accelerator_requests", json={"device_profile_name": name})
    assert r.status_code == 201, r.text
    [arq] = r.json()["arqs"]
    fpga_rp = next(
        d["rp_uuid"]
        for d in api_json(server, "/v2/deployables")["deployables"]
        if d["driver_name"] == "fake" and d["name"].startswith(server.host)
    )
    bind = [
        {"op": "add", "path": "/hostname", "value": server.host},
        {"op": "add", "path": "/device_rp_uuid", "value": fpga_rp},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    r = api(server, "PATCH", "/v2/accelerator_requests", json={arq["uuid"]: bind})
    assert r.status_code == 202, r.text
    assert api_json(server, f"/v2/accelerator_requests/{arq['uuid']}")["state"] == "Bound"
    yield arq["uuid"]
    r = api(server, "DELETE", f"/v2/accelerator_requests/{arq['uuid']}")
    assert r.status_code == 204, r.text
    r = api(server, "DELETE", f"/v2/device_profiles/{name}")
    assert r.status_code == 204, r.text


def confirm(page: Page, label: str) -> None:
    """Press the button named ``label`` in the confirmation dialog an action opens."""
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=label, exact=True).click()
    expect(dialog).to_have_count(0)


def tile(page: Page, title: str):
    """The fleet page's tile whose heading is ``title``."""
    return page.locator("section.tile").filter(
        has=page.get_by_role("heading", name=title, exact=True)
    )


def expect_counts(counts, expected: dict[str, int]) -> None:
    """A list of counts (``ul.counts``) shows exactly ``expected``, by name."""
    names = sorted(expected)
    expect(counts.locator("li > :first-child")).to_have_text(names)
    expect(counts.locator("li > strong")).to_have_text([str(expected[n]) for n in names])


def no_horizontal_overflow(page: Page) -> None:
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.body.scrollWidth,"
        " document.documentElement.clientWidth]"
    )
    assert max(widths[:2]) <= widths[2], f"the page is wider than the screen: {widths}"


# -- what the pages show ------------------------------------------------------------


def test_fleet_page_shows_the_simulated_hosts_devices(server, open_page):
    devices = api_json(server, f"/v2/devices?hostname={server.host}")["devices"]
    assert {d["type"] for d in devices} >= {"FPGA", "GPU"}
    page = open_page(dashboard(server))

    expect(page.get_by_role("heading", name="Fleet", level=1)).to_be_visible()
    expect(card(page, "Hosts").get_by_role("link", name=server.host, exact=True)).to_be_visible()
    rows = card(page, "Devices").locator("tbody tr")
    for device in devices:
        row = rows.filter(has_text=device["pci_address"])
        expect(row).to_contain_text(device["type"])
        expect(row).to_contain_text(device["model"])
        expect(row).to_contain_text(device["status"])
    summary = api_json(server, "/v2/summary")
    tiles = page.locator(".tiles")
    for device_type, count in summary["devices"]["by_type"].items():
        expect(tiles.locator("li").filter(has_text=device_type)).to_contain_text(str(count))
    path = screenshot(page, "fleet.png")
    print(f"fleet page screenshot: {path}")


def test_fleet_page_counts_report_ages_held_handles_and_failed_jobs(
    server, open_page, stale_host, held_handle, failed_job
):
    """Every figure of the fleet page against the API's lists, counted here: a host that
    last reported three hours ago, one attach handle held by a bound ARQ, a failed job."""
    hosts = {h["hostname"]: h for h in api_json(server, "/v2/hosts")["hosts"]}
    handles = api_json(server, "/v2/attach_handles")["attach_handles"]
    devices = api_json(server, "/v2/devices")["devices"]
    failed = api_json(server, "/v2/jobs?state=failed")["jobs"]
    held = [h for h in handles if h["in_use"]]
    assert len(held) == 1 and held[0]["holder"] is not None, held
    assert failed_job["id"] in {j["id"] for j in failed}
    page = open_page(dashboard(server))

    # Hosts: reporting and stale; each host's last report's age and handles in use.
    stale = sum(1 for h in hosts.values() if h["report_age_seconds"] > STALE_AFTER)
    assert stale >= 1
    expect(tile(page, "Hosts").locator("p.total")).to_have_text(str(len(hosts)))
    expect(tile(page, "Hosts")).to_contain_text(f"{len(hosts) - stale} reporting")
    expect(tile(page, "Hosts")).to_contain_text(f"{stale} stale")
    rows = card(page, "Hosts").locator("tbody tr")
    expect(rows).to_have_count(len(hosts))
    old_row = rows.filter(has=page.get_by_role("link", name=stale_host, exact=True))
    expect(old_row.locator("td").nth(1)).to_have_text("3 h")
    expect(old_row.locator("td").nth(4)).to_have_text("0 / 2")
    live_row = rows.filter(has=page.get_by_role("link", name=server.host, exact=True))
    expect(live_row.locator("td").nth(1)).to_have_text(re.compile(r"^(\d+ s|\d+ min)$"))
    own = [h for h in handles if h["hostname"] == server.host]
    expect(live_row.locator("td").nth(4)).to_have_text(f"1 / {len(own)}")

    # Attach handles: held and free, over the whole fleet.
    handles_tile = tile(page, "Attach handles")
    expect(handles_tile.locator("p.total")).to_have_text(str(len(handles)))
    expect(handles_tile.locator(".badge")).to_have_text(["1 held", f"{len(handles) - 1} free"])

    # Devices by type, and by state (status, then presence).
    expect(tile(page, "Devices by type").locator("p.total")).to_have_text(str(len(devices)))
    expect_counts(
        tile(page, "Devices by type").locator("ul.counts"),
        collections.Counter(d["type"] for d in devices),
    )
    by_state = tile(page, "Devices by state").locator("ul.counts")
    expect(by_state).to_have_count(2)
    expect_counts(by_state.nth(0), collections.Counter(d["status"] for d in devices))
    expect_counts(by_state.nth(1), collections.Counter(d["presence"] for d in devices))

    # Failed jobs: the tile's count and a row each, with why and Retry.
    failed_count = (
        tile(page, "Jobs")
        .locator("li")
        .filter(has=page.get_by_role("link", name="failed", exact=True))
    )
    expect(failed_count.locator("strong")).to_have_text(str(len(failed)))
    failed_rows = card(page, "Failed jobs").locator("tbody tr")
    expect(failed_rows).to_have_count(len(failed))
    row = failed_rows.filter(has_text=failed_job["key"])
    expect(row.locator("td").nth(0)).to_have_text(str(failed_job["id"]))
    expect(row).to_contain_text("failed")
    expect(row).to_contain_text(failed_job["last_error"])
    expect(row.get_by_role("button", name="Retry")).to_be_visible()


def test_host_page_shows_devices_deployables_and_attach_handles(server, open_page):
    handles = api_json(server, f"/v2/attach_handles?hostname={server.host}")["attach_handles"]
    deployables = {h["deployable_name"] for h in handles}
    page = open_page(dashboard(server))
    card(page, "Hosts").get_by_role("link", name=server.host, exact=True).click()

    expect(page.get_by_role("heading", name=f"Host {server.host}", level=1)).to_be_visible()
    assert page.url.endswith(f"#/hosts/{server.host}")
    for name in deployables:
        expect(card(page, "Deployables").locator("tbody tr").filter(has_text=name)).to_have_count(1)
    expect(card(page, "Attach handles").locator("tbody tr")).to_have_count(len(handles))
    for device in api_json(server, f"/v2/devices?hostname={server.host}")["devices"]:
        expect(card(page, "Devices")).to_contain_text(device["model"])


def test_device_page_shows_the_device_and_its_handles(server, open_page):
    device = _device(server, "FPGA")
    handles = api_json(server, f"/v2/attach_handles?device_uuid={device['uuid']}")
    labelled = api(
        server,
        "POST",
        "/v2/device_labels",
        json={"uuids": [device["uuid"]], "set": {"rack": "a1", "team.ml": "vision"}},
        headers={"OpenStack-API-Version": "accelerator 2.10"},
    )
    assert labelled.status_code == 200, labelled.text
    page = open_page(dashboard(server, f"/hosts/{server.host}"))
    card(page, "Devices").get_by_role("link", name=device["model"]).click()

    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"{device['type']} {device['model']} on {server.host}"
    )
    facts = card(page, "Device")
    for value in (device["uuid"], device["pci_address"], device["driver_name"], device["status"]):
        expect(facts).to_contain_text(value)
    expect(facts).to_contain_text("rack=a1, team.ml=vision")
    expect(card(page, "Attach handles").locator("tbody tr")).to_have_count(
        len(handles["attach_handles"])
    )
    expect(facts.get_by_role("button", name="Disable")).to_be_visible()


def test_arqs_page_shows_requests_with_their_state(server, open_page):
    r = api(
        server,
        "POST",
        "/v2/device_profiles",
        json=[{"name": "browser-fpga", "groups": [{"resources:FPGA": "1"}]}],
    )
    assert r.status_code == 201, r.text
    r = api(
        server,
        "POST",
        "/v2/accelerator_requests",
        json={"device_profile_name": "browser-fpga"},
        headers=MANAGER,
    )
    assert r.status_code == 201, r.text
    (arq,) = r.json()["arqs"]
    page = open_page(dashboard(server, "/arqs"))

    row = page.locator("tbody tr").filter(has=page.locator(f'[title="{arq["uuid"]}"]'))
    expect(row).to_contain_text("Initial")
    expect(row).to_contain_text("browser-fpga")
    page.get_by_role("link", name="Bound", exact=True).click()
    expect(page.get_by_text("No accelerator requests.")).to_be_visible()


def test_jobs_page_lists_the_failed_job(server, failed_job, open_page):
    page = open_page(dashboard(server, "/jobs?state=failed"))
    row = page.locator("tbody tr").filter(has_text=failed_job["key"])
    expect(row).to_contain_text("failed")
    expect(row).to_contain_text("no handler for job kind")
    expect(row.get_by_role("button", name="Retry")).to_be_visible()


# -- a change appears without a reload -------------------------------------------------


def test_a_new_hosts_report_appears_on_the_fleet_page_without_reload(server, open_page):
    page = open_page(dashboard(server))
    hosts = card(page, "Hosts")
    expect(hosts.get_by_role("link", name=server.host, exact=True)).to_be_visible()
    page.evaluate("window.sameDocument = 'yes'")  # a reload would forget it
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))

    report(server, "browser-new-host", [fpga("0000:0d:00.0", handles=4)])

    expect(hosts.get_by_role("link", name="browser-new-host", exact=True)).to_be_visible()
    row = hosts.locator("tbody tr").filter(has_text="browser-new-host")
    expect(row).to_contain_text("0 / 4")
    assert page.evaluate("window.sameDocument") == "yes"
    assert navigations == []


# -- admin actions: shown to everyone, answered by the API's policy ------------------


def _device(server, device_type: str) -> dict:
    devices = api_json(server, f"/v2/devices?hostname={server.host}")["devices"]
    return next(d for d in devices if d["type"] == device_type)


def test_a_manager_is_not_offered_disable_and_the_api_refuses_it_anyway(server, open_page):
    device = _device(server, "GPU")
    assert device["status"] == "enabled"
    page = open_page(dashboard(server, f"/devices/{device['uuid']}"), headers=MANAGER)

    # GET /v2/permissions says a manager does not pass cyborg:device:disable: no button.
    expect(card(page, "Device")).to_contain_text("enabled")
    expect(page.get_by_role("button", name="Disable")).to_have_count(0)
    r = api(server, "POST", f"/v2/devices/{device['uuid']}/disable", headers=MANAGER)
    assert r.status_code == 403, r.text
    assert api_json(server, f"/v2/devices/{device['uuid']}")["status"] == "enabled"


def test_a_manager_clicking_retry_is_refused_and_the_job_stays_failed(
    server, failed_job, open_page
):
    page = open_page(dashboard(server, "/jobs?state=failed"), headers=MANAGER)
    row = page.locator("tbody tr").filter(has_text=failed_job["key"])
    expect(row).to_contain_text("failed")

    latest = {**MANAGER, "OpenStack-API-Version": "accelerator 2.11"}
    if api(server, "GET", "/v2/permissions", headers=latest).status_code == 200:
        # The console knows the manager does not pass exosuit:job:retry: no button.
        expect(row.get_by_role("button", name="Retry")).to_have_count(0)
        r = api(server, "POST", f"/v2/jobs/{failed_job['id']}/retry", headers=MANAGER)
        assert r.status_code == 403, r.text
    else:
        row.get_by_role("button", name="Retry").click()
        page.get_by_role("dialog").get_by_role("button", name="Retry", exact=True).click()
        notice = page.locator("#notice")
        expect(notice).to_contain_text("Retry refused (HTTP 403)")
        expect(notice).to_contain_text("disallowed by policy")
    job = api_json(server, f"/v2/jobs/{failed_job['id']}")
    assert (job["state"], job["attempts"], job["updated_at"]) == (
        "failed",
        failed_job["attempts"],
        failed_job["updated_at"],
    )


def test_a_reader_sees_the_refusal_instead_of_the_inventory(server, open_page):
    device = _device(server, "FPGA")
    page = open_page(dashboard(server), headers=READER)
    expect(page.locator(".failure")).to_contain_text("HTTP 403")
    expect(page.locator(".failure")).to_contain_text("disallowed by policy")

    page.goto(dashboard(server, f"/devices/{device['uuid']}"))
    expect(page.locator("main h1")).to_have_text("Device")
    expect(page.locator(".failure")).to_contain_text("HTTP 403")
    expect(page.get_by_role("button", name="Disable")).to_have_count(0)
    # ARQs are readable by a project reader: that page works.
    page.get_by_role("link", name="ARQs").click()
    expect(page.get_by_role("heading", name="Accelerator requests", level=1)).to_be_visible()
    expect(page.locator(".failure")).to_have_count(0)


def test_an_admin_disables_and_enables_a_device(server, open_page):
    device = _device(server, "FPGA")
    page = open_page(dashboard(server, f"/devices/{device['uuid']}"))
    facts = card(page, "Device")

    facts.get_by_role("button", name="Disable").click()
    confirm(page, "Disable")
    expect(page.locator("#notice")).to_contain_text("is disabled")
    expect(facts).to_contain_text("maintaining")
    assert api_json(server, f"/v2/devices/{device['uuid']}")["status"] == "maintaining"

    facts.get_by_role("button", name="Enable").click()
    confirm(page, "Enable")
    expect(page.locator("#notice")).to_contain_text("is enabled")
    expect(facts.get_by_role("button", name="Disable")).to_be_visible()
    assert api_json(server, f"/v2/devices/{device['uuid']}")["status"] == "enabled"


def test_an_admin_retries_a_failed_job(server, failed_job, open_page):
    page = open_page(dashboard(server, "/jobs?state=failed"))
    row = page.locator("tbody tr").filter(has_text=failed_job["key"])

    row.get_by_role("button", name="Retry").click()
    page.get_by_role("dialog").get_by_role("button", name="Retry", exact=True).click()

    expect(page.locator("#notice")).to_contain_text(f"Job {failed_job['id']}")
    expect(page.locator("#notice")).to_contain_text("pending again")
    # It runs again (and fails again: still no handler), one more attempt recorded.
    deadline = time.monotonic() + WAIT
    while (
        api_json(server, f"/v2/jobs/{failed_job['id']}")["updated_at"] == failed_job["updated_at"]
    ):
        assert time.monotonic() < deadline, "the retried job was not run again"
        time.sleep(0.1)


# -- what the page does with what it shows ---------------------------------------------


def test_text_from_the_api_is_shown_never_interpreted(server, open_page):
    """A device model holding HTML is shown as text: no element, no script."""
    model = '<img src=x onerror="window.injected=1"><b>bold</b>'
    device = dataclasses.replace(fpga("0000:0e:00.0", handles=1), model=model)
    report(server, "browser-html-host", [device])
    page = open_page(dashboard(server, "/hosts/browser-html-host"))

    expect(card(page, "Devices")).to_contain_text(model)
    assert page.locator("main img, main b").count() == 0
    assert page.evaluate("window.injected") is None


def test_a_phone_sized_screen_has_no_horizontal_overflow(server, open_page):
    page = open_page(dashboard(server), viewport=PHONE)
    expect(card(page, "Hosts").get_by_role("link", name=server.host, exact=True)).to_be_visible()
    no_horizontal_overflow(page)
    screenshot(page, "fleet-phone.png")
    gpu = _device(server, "GPU")
    for route, heading in (
        (f"/hosts/{server.host}", f"Host {server.host}"),
        (f"/devices/{gpu['uuid']}", f"{gpu['type']} {gpu['model']} on {server.host}"),
        ("/jobs", "Jobs"),
        ("/arqs", "Accelerator requests"),
    ):
        page.goto(dashboard(server, route))
        expect(page.locator("main h1")).to_have_text(heading)
        expect(page.locator("main table, main p.muted").first).to_be_visible()
        no_horizontal_overflow(page)
